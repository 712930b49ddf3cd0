#!/usr/bin/env python3
"""deploy/kubernetes against the Kubernetes API schemas, offline.

Every object of every *.yaml under deploy/kubernetes (cluster/ included; the
kustomization files aside) is validated against the OpenAPI schema of its
apiVersion and kind by kubernetes_schema_validate.mjs, which uses the
validators of the npm package kubernetes-models (package.json
devDependency; `npm ci` installs it, and this test runs `npm ci` when it is
missing). Missing required fields, wrong types, values outside an enum,
malformed quantities and fields the schema does not have all fail. Also
validated: the agent DaemonSet with agent-nvml-hostpath.patch.yaml applied,
a pair that cluster/new-pair.sh writes for a new shard, and, where kubectl
is installed, what `kubectl kustomize` renders from each kustomization
(with the patch enabled too).

Then what the schema cannot know, against the sources:
  - each kustomization's resources and patches exist;
  - every flag passed to vigil-server, vigil-agent and vigil-actuator is one
    it defines (the ABSL_FLAGs of server/main.cc, agent/main.cc,
    actuator/main.cc),
    and every $(VAR) in args is in the container's env;
  - server.json and agent.json in the ConfigMaps are JSON whose keys the
    parsers know (server/config/config.cc, agent/agent_config.cc);
  - the agent's node name comes from spec.nodeName, its host paths are
    read-only but for the socket directory and the spool, and it runs as
    non-root without capabilities;
  - the actuator's ClusterRole grants exactly nodes get/patch, batch jobs
    get/patch and pods list (what actuator/kubernetes_scheduler.cc calls),
    and no Role anywhere uses a wildcard;
  - every ConfigMap and Secret a pod mounts is defined in deploy/kubernetes
    or in secrets.example.yaml, in the pod's namespace.

Last, it breaks copies of the manifests (a misspelt field, a string for an
integer, a missing required field, ...) and checks that each break is
reported, so the checks can fail.

Usage: kubernetes_schema_test.py [MANIFEST_DIR]   (default deploy/kubernetes)
Exit 77: no PyYAML (Debian python3-yaml). Node.js >= 20 and npm are needed
(deploy/install-deps.sh); without them the test fails.
"""
import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
except ImportError:
    print("SKIP: no PyYAML (apt-get install python3-yaml)")
    sys.exit(77)

SRC = Path(__file__).resolve().parents[2]
VALIDATOR = Path(__file__).resolve().parent / "kubernetes_schema_validate.mjs"
PATCH_SUFFIX = ".patch.yaml"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod")
# What vigil-actuator's Kubernetes backend requests (actuator/README.md).
ACTUATOR_RULES = {("", "nodes"): {"get", "patch"},
                  ("batch", "jobs"): {"get", "patch"},
                  ("", "pods"): {"list"}}
AGENT_WRITABLE_HOST_PATHS = {"/run/vigil", "/var/lib/vigil-agent"}


class Report:
    def __init__(self, verbose):
        self.verbose = verbose
        self.failures = []
        self.checks = 0

    def check(self, what, ok, detail=""):
        self.checks += 1
        if not ok:
            self.failures.append(what)
            if self.verbose:
                print(f"FAIL {what}{': ' + detail if detail else ''}", flush=True)
        elif self.verbose:
            print(f"ok   {what}", flush=True)
        return ok


# ---------------------------------------------------------------- sources

def source(path):
    return (SRC / path).read_text()


def string_list(text, pattern):
    """The quoted strings inside the first brace list after `pattern`."""
    m = re.search(pattern + r"[^{]*\{([^}]*)\}", text)
    return set(re.findall(r'"([\w-]+)"', m.group(1))) if m else set()


def abseil_flags(text):
    """Names (dashed, as on the command line) of the ABSL_FLAGs in `text`."""
    return {name.replace("_", "-")
            for name in re.findall(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,", text)}


def known_flags():
    """{binary: set of flag names} from the ABSL_FLAGs in each main.cc
    (common/flags.h)."""
    return {
        "vigil-agent": abseil_flags(source("agent/main.cc")),
        "vigil-server": abseil_flags(source("server/main.cc")),
        "vigil-actuator": abseil_flags(source("actuator/main.cc")),
    }


def known_config_keys():
    """Top-level keys of server.json and agent.json, from their parsers."""
    return {
        "server.json": string_list(source("server/config/config.cc"),
                                   r'CheckObject\(root,\s*"",'),
        "agent.json": string_list(source("agent/agent_config.cc"),
                                  r'CheckObject\(doc,\s*"",'),
    }


# -------------------------------------------------------------- manifests

def load_dir(root):
    """([(where, object)], {patch path: [documents]}) of every *.yaml."""
    objects, patches = [], {}
    for path in sorted(glob.glob(str(root / "**" / "*.yaml"), recursive=True)):
        rel = os.path.relpath(path, root)
        if os.path.basename(path) == "kustomization.yaml":
            continue
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        if path.endswith(PATCH_SUFFIX):
            patches[rel] = docs
            continue
        for i, d in enumerate(docs):
            objects.append((f"{rel}#{i} {describe(d)}", d))
    return objects, patches


def describe(d):
    if not isinstance(d, dict):
        return "(not a mapping)"
    return f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}"


def same_object(a, b):
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return (a.get("kind") == b.get("kind") and ma.get("name") == mb.get("name") and
            ma.get("namespace") == mb.get("namespace"))


def merge(base, patch):
    """A strategic merge patch as kustomize applies it to the fields these
    manifests use: mappings merge, lists of mappings merge by "name", other
    values (args, scalars) replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and
            all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        for item in patch:
            i = next((i for i, x in enumerate(out) if x["name"] == item["name"]), None)
            if i is None:
                out.append(copy.deepcopy(item))
            else:
                out[i] = merge(out[i], item)
        return out
    return copy.deepcopy(patch)


def patched_objects(r, objects, patches):
    out = []
    for rel, docs in patches.items():
        for p in docs:
            targets = [(w, o) for w, o in objects if isinstance(o, dict) and same_object(o, p)]
            if r.check(f"{rel}: patches an object of the manifests ({describe(p)})",
                       len(targets) == 1, f"{len(targets)} targets"):
                out.append((f"{targets[0][0]} + {rel}", merge(targets[0][1], p)))
    return out


def new_pair_objects(r, root):
    script = root / "cluster" / "new-pair.sh"
    if not script.is_file():
        return []
    run = subprocess.run(["bash", str(script), "s9"], capture_output=True, text=True)
    if not r.check("cluster/new-pair.sh s9 writes a pair", run.returncode == 0, run.stderr):
        return []
    return [(f"new-pair.sh s9#{i} {describe(d)}", d)
            for i, d in enumerate(yaml.safe_load_all(run.stdout)) if d is not None]


def check_kustomizations(r, root, patches):
    """Resources and patches exist; returns [(where, object)] rendered by
    kubectl kustomize (none without kubectl)."""
    rendered = []
    kubectl = shutil.which("kubectl")
    dirs = sorted(Path(p).parent for p in
                  glob.glob(str(root / "**" / "kustomization.yaml"), recursive=True))
    r.check("deploy/kubernetes has a kustomization.yaml", root in dirs)
    for d in dirs:
        rel = os.path.relpath(d, root)
        kust = yaml.safe_load((d / "kustomization.yaml").read_text()) or {}
        entries = list(kust.get("resources") or []) + [
            p["path"] for p in kust.get("patches") or [] if isinstance(p, dict) and "path" in p]
        missing = [e for e in entries if not (d / e).exists()]
        r.check(f"{rel}/kustomization.yaml: its resources and patches exist", not missing,
                repr(missing))
        if kubectl:
            rendered += render(r, kubectl, d, f"kustomize {rel}")
    if kubectl is None:
        print("note: no kubectl; `kubectl kustomize` output not validated")
        return rendered
    # The top-level set with each patch enabled, as its comment says.
    for rel in patches:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(root, Path(tmp) / "k", ignore=shutil.ignore_patterns("cluster"))
            k = Path(tmp) / "k" / "kustomization.yaml"
            kust = yaml.safe_load(k.read_text())
            kust["patches"] = [{"path": rel}]
            k.write_text(yaml.safe_dump(kust))
            rendered += render(r, kubectl, k.parent, f"kustomize . + {rel}")
    return rendered


def render(r, kubectl, directory, label):
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                         text=True, timeout=120)
    if not r.check(f"{label}: kubectl kustomize renders it", out.returncode == 0,
                   out.stderr.strip()):
        return []
    return [(f"{label}#{i} {describe(d)}", d)
            for i, d in enumerate(yaml.safe_load_all(out.stdout)) if d is not None]


# ------------------------------------------------------------- validation

def ensure_validator():
    """None when kubernetes-models can be loaded, else why not."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (deploy/install-deps.sh installs nodejs)"
    major = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"],
                           capture_output=True, text=True).stdout.strip()
    if not major.isdigit() or int(major) < 20:
        return f"node {major} is too old; need >= 20"
    if not (SRC / "node_modules" / "kubernetes-models" / "package.json").is_file():
        npm = shutil.which("npm")
        if npm is None:
            return "node_modules/kubernetes-models is missing and npm is not installed"
        print("node_modules/kubernetes-models missing; running npm ci", flush=True)
        if subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=SRC).returncode != 0:
            return "npm ci failed"
    return None


def schema_errors(objects):
    """(schema source, {where: [errors]}) for [(where, object)]."""
    payload = json.dumps([{"where": w, "object": o} for w, o in objects], default=str)
    out = subprocess.run(["node", str(VALIDATOR), str(SRC)], input=payload,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{VALIDATOR.name} failed: {out.stderr.strip()}")
    answer = json.loads(out.stdout)
    return answer["schemas"], {x["where"]: x["errors"] for x in answer["results"]}


# ------------------------------------------------------- project invariants

def containers_of(o):
    spec = ((o.get("spec") or {}).get("template") or {}).get("spec") or o.get("spec") or {}
    return spec, (spec.get("initContainers") or []) + (spec.get("containers") or [])


def check_project(r, objects, flags, config_keys):
    objs = [(w, o) for w, o in objects if isinstance(o, dict)]
    binaries = set()
    defined = {(o.get("kind"), (o.get("metadata") or {}).get("namespace"),
                (o.get("metadata") or {}).get("name")) for _, o in objs}
    for where, o in objs:
        if o.get("kind") not in WORKLOADS:
            continue
        ns = (o.get("metadata") or {}).get("namespace")
        pod, containers = containers_of(o)
        for c in containers:
            command = [str(x) for x in (c.get("command") or [])]
            args = [str(x) for x in (c.get("args") or [])]
            binary = os.path.basename(command[0]) if command else ""
            binaries.add(binary)
            env = {e.get("name"): e for e in c.get("env") or []}
            for var in sorted(set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", " ".join(args)))):
                r.check(f"{where} {c.get('name')}: $({var}) is in its env", var in env)
            if binary in flags:
                unknown = [a for a in args if a.startswith("--") and
                           re.match(r"--([\w-]+)", a).group(1) not in flags[binary]]
                r.check(f"{where} {c.get('name')}: {binary} knows every flag", not unknown,
                        f"unknown {unknown}")
            if binary == "vigil-agent":
                check_agent(r, where, pod, c, env, args)
        if ns is not None and o.get("kind") != "Job":
            for v in pod.get("volumes") or []:
                for kind, ref, key in (("ConfigMap", v.get("configMap"), "name"),
                                       ("Secret", v.get("secret"), "secretName")):
                    if ref and not ref.get("optional"):
                        r.check(f"{where}: {kind} {ref.get(key)} it mounts is defined in {ns}",
                                (kind, ns, ref.get(key)) in defined)

    for where, o in objs:
        if o.get("kind") != "ConfigMap":
            continue
        for name, text in (o.get("data") or {}).items():
            if name not in config_keys:
                continue
            try:
                config = json.loads(text)
            except (TypeError, ValueError) as e:
                r.check(f"{where}: {name} is JSON", False, str(e))
                continue
            unknown = set(config) - config_keys[name] if isinstance(config, dict) else {"?"}
            r.check(f"{where}: {name}'s keys are known to its parser", not unknown,
                    f"unknown {sorted(unknown)}")

    roles = [(w, o) for w, o in objs if o.get("kind") in ("Role", "ClusterRole")]
    for where, o in roles:
        wild = [rule for rule in o.get("rules") or []
                if "*" in (rule.get("verbs") or []) + (rule.get("resources") or []) +
                (rule.get("apiGroups") or [])]
        r.check(f"{where}: no wildcard in its rules", not wild, repr(wild))
    actuator = [o for w, o in roles if o["metadata"].get("name") == "vigil-actuator"]
    for o in actuator:
        grants = {}
        for rule in o.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for res in rule.get("resources") or []:
                    grants.setdefault((group, res), set()).update(rule.get("verbs") or [])
        extra = {k: sorted(v) for k, v in grants.items() if v - ACTUATOR_RULES.get(k, set())}
        lacking = {k: sorted(v) for k, v in ACTUATOR_RULES.items() if v - grants.get(k, set())}
        r.check("ClusterRole vigil-actuator grants exactly nodes get/patch, jobs get/patch, "
                "pods list", not extra and not lacking and
                not any(rule.get("resourceNames") or rule.get("nonResourceURLs")
                        for rule in o.get("rules") or []),
                f"more: {extra}, missing: {lacking}")
    r.check("the actuator's ClusterRole is there", bool(actuator))
    for binary in sorted(flags):
        r.check(f"a container runs {binary}", binary in binaries)


def check_agent(r, where, pod, c, env, args):
    name = f"{where} vigil-agent"
    r.check(f"{name}: --node is $(NODE_NAME)", "--node=$(NODE_NAME)" in args, repr(args))
    r.check(f"{name}: NODE_NAME comes from spec.nodeName (downward API)",
            ((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {})
            .get("fieldPath") == "spec.nodeName")
    sc = c.get("securityContext") or {}
    r.check(f"{name}: runs as non-root with no capabilities and no privilege escalation",
            sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0 and
            (sc.get("capabilities") or {}).get("drop") == ["ALL"] and
            not (sc.get("capabilities") or {}).get("add") and
            (sc.get("allowPrivilegeEscalation") is False or sc.get("privileged") is True) and
            sc.get("readOnlyRootFilesystem") is True, repr(sc))
    host = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes") or []
            if v.get("hostPath")}
    for m in c.get("volumeMounts") or []:
        path = host.get(m.get("name"))
        if path is not None and path not in AGENT_WRITABLE_HOST_PATHS:
            r.check(f"{name}: host path {path} is mounted read-only", m.get("readOnly") is True)
    r.check(f"{name}: mounts /sys from the host",
            "/sys" in host.values() and any(host.get(m.get("name")) == "/sys"
                                            for m in c.get("volumeMounts") or []))
    r.check(f"{name}: hostPID (peers' pids and cgroups for job verification)",
            pod.get("hostPID") is True)


# -------------------------------------------------------------- self-test

def mutations():
    """(what, source file, kind, name, change) each breaking one object."""
    def pod(o):
        return o["spec"]["template"]["spec"]

    def agent(o):
        return next(c for c in pod(o)["containers"] if c["name"] == "vigil-agent")

    def rename(d, old, new):
        d[new] = d.pop(old)

    return [
        ("misspelt field 'contaners'", "schema", "DaemonSet", "vigil-agent",
         lambda o: rename(pod(o), "containers", "contaners")),
        ("string where an integer belongs (containerPort)", "schema", "DaemonSet", "vigil-agent",
         lambda o: agent(o)["ports"][0].__setitem__("containerPort", "9465")),
        ("string replicas", "schema", "StatefulSet", "vigil-server",
         lambda o: o["spec"].__setitem__("replicas", "1")),
        ("unknown nested field (volumeMount readonly)", "schema", "DaemonSet", "vigil-agent",
         lambda o: agent(o)["volumeMounts"][0].__setitem__("readonly", True)),
        ("misspelt pod field hostPid", "schema", "DaemonSet", "vigil-agent",
         lambda o: rename(pod(o), "hostPID", "hostPid")),
        ("missing required selector", "schema", "DaemonSet", "vigil-agent",
         lambda o: o["spec"].pop("selector")),
        ("missing required container name", "schema", "Deployment", "vigil-actuator",
         lambda o: pod(o)["containers"][0].pop("name")),
        ("value outside an enum (toleration operator)", "schema", "DaemonSet", "vigil-agent",
         lambda o: pod(o)["tolerations"][0].__setitem__("operator", "Exist")),
        ("malformed quantity", "schema", "StatefulSet", "vigil-server",
         lambda o: o["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
         .__setitem__("storage", "256 GB")),
        ("ClusterRole rule 'verb' for 'verbs'", "schema", "ClusterRole", "vigil-actuator",
         lambda o: rename(o["rules"][0], "verbs", "verb")),
        ("PDB minAvailable a list", "schema", "PodDisruptionBudget", "vigil-server",
         lambda o: o["spec"].__setitem__("minAvailable", [1])),
        ("ConfigMap data value not a string", "schema", "ConfigMap", "vigil-agent-config",
         lambda o: o["data"].__setitem__("extra", 5)),
        ("unknown top-level field", "schema", "Service", "vigil",
         lambda o: o.__setitem__("specs", {})),
        ("actuator may delete nodes", "project", "ClusterRole", "vigil-actuator",
         lambda o: o["rules"][0]["verbs"].append("delete")),
        ("actuator may list secrets", "project", "ClusterRole", "vigil-actuator",
         lambda o: o["rules"].append({"apiGroups": [""], "resources": ["secrets"],
                                      "verbs": ["get"]})),
        ("agent flag misspelt", "project", "DaemonSet", "vigil-agent",
         lambda o: agent(o)["args"].__setitem__(
             agent(o)["args"].index("--nvml-library=$(NVML_LIBRARY)"),
             "--nvml-libary=$(NVML_LIBRARY)")),
        ("agent node name not from the downward API", "project", "DaemonSet", "vigil-agent",
         lambda o: agent(o)["env"].__setitem__(0, {"name": "NODE_NAME", "value": "gpu-1"})),
        ("agent /sys writable", "project", "DaemonSet", "vigil-agent",
         lambda o: next(m for m in agent(o)["volumeMounts"] if m["name"] == "host-sys")
         .pop("readOnly")),
        ("agent.json unknown key", "project", "ConfigMap", "vigil-agent-config",
         lambda o: o["data"].__setitem__("agent.json", o["data"]["agent.json"].replace(
             '"spool_dir"', '"spool_directory"'))),
        ("server mounts an undefined Secret", "project", "StatefulSet", "vigil-server",
         lambda o: o["spec"]["template"]["spec"]["volumes"][1]["secret"]
         .__setitem__("secretName", "vigil-tls")),
    ]


def self_test(r, objects, flags, config_keys):
    broken_schema, project_cases = [], []
    for what, layer, kind, name, change in mutations():
        found = [(w, o) for w, o in objects if isinstance(o, dict) and o.get("kind") == kind
                 and o["metadata"].get("name") == name and not w.startswith("kustomize")]
        if not r.check(f"self-test: can break {kind}/{name} ({what})", bool(found)):
            continue
        where, obj = found[0]
        broken = copy.deepcopy(obj)
        try:
            change(broken)
        except (KeyError, IndexError, StopIteration, ValueError) as e:
            r.check(f"self-test: can break {kind}/{name} ({what})", False, repr(e))
            continue
        if layer == "schema":
            broken_schema.append((f"BROKEN {what}: {where}", broken))
        else:
            project_cases.append((what, [(w, broken if w == where else o)
                                         for w, o in objects if not w.startswith("kustomize")]))
    _, errors = schema_errors(broken_schema)
    for where, _ in broken_schema:
        r.check(f"self-test: schema reports '{where.split(': ')[0][7:]}'", bool(errors[where]),
                "accepted")
        if errors[where]:
            print(f"     -> {errors[where][0]}")
    for what, copy_of_all in project_cases:
        quiet = Report(verbose=False)
        check_project(quiet, copy_of_all, flags, config_keys)
        r.check(f"self-test: '{what}' is reported", bool(quiet.failures))


def main():
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else SRC / "deploy" / "kubernetes"
    r = Report(verbose=True)
    why = ensure_validator()
    if why:
        print(f"FAIL: {why}")
        return 1
    objects, patches = load_dir(root)
    r.check(f"{root} has manifests", len(objects) > 0)
    objects += patched_objects(r, objects, patches)
    objects += new_pair_objects(r, root)
    objects += check_kustomizations(r, root, patches)

    schemas, errors = schema_errors(objects)
    print(f"schemas: {schemas} (Kubernetes API OpenAPI, validated offline)")
    for where, _ in objects:
        r.check(f"schema: {where}", not errors[where], "; ".join(errors[where][:5]))

    flags, config_keys = known_flags(), known_config_keys()
    r.check("found the flags of the three programs in their sources",
            all(len(v) > 5 for v in flags.values()), repr(flags))
    r.check("found the config keys in their parsers",
            all(len(v) > 5 for v in config_keys.values()), repr(config_keys))
    check_project(r, objects, flags, config_keys)
    self_test(r, objects, flags, config_keys)

    if r.failures:
        print(f"{len(r.failures)} of {r.checks} checks failed")
        return 1
    print(f"all {r.checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
