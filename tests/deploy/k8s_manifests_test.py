#!/usr/bin/env python3
"""Invariants of the cluster-mode deployment files (docs/SCALING.md).

deploy/kubernetes/cluster (every *.yaml, parsed with PyYAML):
  - every vigil-server StatefulSet (a shard pair) has 2 replicas, a
    required pod anti-affinity on kubernetes.io/hostname that selects its
    own pods and no other pair's, a PodDisruptionBudget with
    maxUnavailable 1 selecting exactly its pods, a headless Service named
    by its serviceName, args carrying --shard (unique per pair),
    --replica=$(POD_NAME), --advertise-grpc and --advertise-http on its
    stable DNS name and ports, POD_NAME from the downward API, the data dir
    on a volumeClaimTemplate, --config mounted from a ConfigMap, probes on
    paths vigil-server serves (found in server/**/*.cc), resource requests;
  - each such ConfigMap's server.json is valid JSON with a "cluster"
    section whose keys are known and whose etcd endpoints are http:// or https:// URLs,
    and listen ports that match the containers' ports;
  - the Service "vigil" reaches every pair on 8080 (http) and 50051 (grpc);
  - kustomization.yaml lists every manifest but the etcd example;
  - the etcd example (if present) has an odd number >= 3 of members, and
    the config's endpoints name them;
  - vigil-s*.yaml are what new-pair.sh writes from pair.yaml.in;
  - `kubectl kustomize` renders the directory (when kubectl is installed).
deploy/systemd: vigil-server-cluster.json is valid JSON with such a
cluster section; server.env sets the four per-machine flags;
vigil-server-cluster.service reads server.env, passes $VIGIL_SERVER_ARGS
and keeps every other setting of vigil-server.service.

Then it breaks copies of the manifests one invariant at a time and
checks that each break is reported (so the checks can fail).

Usage: k8s_manifests_test.py   Exit 77: no PyYAML (Debian: python3-yaml).
"""
import contextlib
import copy
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import yaml
except ImportError:
    print("SKIP: no PyYAML (apt-get install python3-yaml)")
    sys.exit(77)

SRC = Path(__file__).resolve().parents[2]
K8S = SRC / "deploy" / "kubernetes" / "cluster"
SYSTEMD = SRC / "deploy" / "systemd"
APP_LABEL = "app.kubernetes.io/name"
SERVER_APP = "vigil-server"
# The "cluster" section's keys, as the server's parser knows them
# (server/cluster/cluster_config.cc; docs/SCALING.md, "Configuration").
CLUSTER_KEYS = set(re.findall(r'"(\w+)"', re.search(
    r"CheckObject\(section, path,\s*\{([^}]*)\}",
    (SRC / "server" / "cluster" / "cluster_config.cc").read_text()).group(1)))
REQUIRED_ARGS = ("--shard=", "--replica=", "--advertise-grpc=", "--advertise-http=")


class Report:
    """Collects failed checks; prints each check when verbose."""

    def __init__(self, verbose):
        self.verbose = verbose
        self.failures = []
        self.checks = 0

    def check(self, what, ok, detail=""):
        self.checks += 1
        if not ok:
            print(f"FAIL {what}{': ' + detail if detail else ''}", flush=True)
        elif self.verbose:
            print(f"ok   {what}", flush=True)
        if not ok:
            self.failures.append(what)
        return ok


def load_manifests():
    """{relative path: [documents]} of every *.yaml under deploy/kubernetes/cluster."""
    out = {}
    for path in sorted(glob.glob(str(K8S / "**" / "*.yaml"), recursive=True)):
        with open(path) as f:
            out[os.path.relpath(path, K8S)] = [d for d in yaml.safe_load_all(f) if d]
    return out


def served_paths():
    """Paths vigil-server registers with httplib (Get("/...")) in server/."""
    paths = set()
    for path in glob.glob(str(SRC / "server" / "**" / "*.cc"), recursive=True):
        paths.update(re.findall(r'\bGet\(\s*"(/[^"]*)"', Path(path).read_text()))
    return paths


def selects(selector, labels):
    """True when a matchLabels selector selects pods with `labels`."""
    match = (selector or {}).get("matchLabels") or {}
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def port_of(address):
    m = re.search(r":(\d+)/?$", address)
    return int(m.group(1)) if m else None


def check_cluster_section(r, where, config):
    cluster = config.get("cluster")
    if not r.check(f"{where}: has a cluster object", isinstance(cluster, dict)):
        return
    unknown = set(cluster) - CLUSTER_KEYS
    r.check(f"{where}: cluster keys are known", not unknown, f"unknown {sorted(unknown)}")
    endpoints = cluster.get("etcd_endpoints")
    r.check(f"{where}: cluster.etcd_endpoints is a non-empty list of http(s):// URLs",
            isinstance(endpoints, list) and endpoints and
            all(isinstance(e, str) and re.fullmatch(r"https?://[^/\s]+:\d+/?", e)
                for e in endpoints), repr(endpoints))
    if "lease_seconds" in cluster:
        lease = cluster["lease_seconds"]
        r.check(f"{where}: cluster.lease_seconds is an integer >= 2",
                isinstance(lease, int) and not isinstance(lease, bool) and lease >= 2,
                repr(lease))
    if "prefix" in cluster:
        r.check(f"{where}: cluster.prefix starts with /",
                isinstance(cluster["prefix"], str) and cluster["prefix"].startswith("/"))


def parse_server_json(r, where, text):
    try:
        config = json.loads(text)
    except (TypeError, ValueError) as e:
        r.check(f"{where}: server.json is valid JSON", False, str(e))
        return None
    r.check(f"{where}: server.json is a JSON object", isinstance(config, dict))
    return config if isinstance(config, dict) else None


def check_k8s(r, manifests, paths_served):
    docs = [(f, d) for f, ds in manifests.items() for d in ds]
    r.check("every manifest document has apiVersion and kind",
            all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind")
                for _, d in docs))

    def of_kind(kind):
        return [d for _, d in docs if isinstance(d, dict) and d.get("kind") == kind]

    services = {d["metadata"]["name"]: d for d in of_kind("Service")}
    pdbs = of_kind("PodDisruptionBudget")
    config_maps = {d["metadata"]["name"]: d for d in of_kind("ConfigMap")}
    statefulsets = of_kind("StatefulSet")
    pairs = [s for s in statefulsets
             if ((s.get("spec", {}).get("template", {}).get("metadata", {})
                  .get("labels") or {}).get(APP_LABEL) == SERVER_APP)]
    r.check("at least two vigil-server StatefulSets (shard pairs)", len(pairs) >= 2,
            f"found {len(pairs)}")
    pod_labels = {p["metadata"]["name"]: p["spec"]["template"]["metadata"]["labels"]
                  for p in pairs}
    shards = []
    server_configs = []

    for sts in pairs:
        name = sts["metadata"]["name"]
        spec = sts["spec"]
        labels = pod_labels[name]
        others = [l for n, l in pod_labels.items() if n != name]
        r.check(f"{name}: replicas is 2", spec.get("replicas") == 2, repr(spec.get("replicas")))
        r.check(f"{name}: selector selects its pod template", selects(spec.get("selector"), labels))
        r.check(f"{name}: selector selects no other pair's pods",
                not any(selects(spec.get("selector"), o) for o in others))

        pod = spec["template"].get("spec", {})
        anti = (pod.get("affinity") or {}).get("podAntiAffinity") or {}
        required = anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        own = [t for t in required if t.get("topologyKey") == "kubernetes.io/hostname" and
               selects(t.get("labelSelector"), labels)]
        r.check(f"{name}: required pod anti-affinity on kubernetes.io/hostname between its pods",
                bool(own))
        r.check(f"{name}: required anti-affinity does not involve other pairs",
                not any(selects(t.get("labelSelector"), o) for t in required for o in others))

        mine = [p for p in pdbs if selects(p.get("spec", {}).get("selector"), labels)]
        r.check(f"{name}: a PodDisruptionBudget selects its pods", len(mine) >= 1)
        for p in mine:
            pname = p["metadata"]["name"]
            r.check(f"{name}: PDB {pname} has maxUnavailable 1",
                    p["spec"].get("maxUnavailable") == 1 and "minAvailable" not in p["spec"],
                    repr(p["spec"]))
            r.check(f"{name}: PDB {pname} selects no other pair's pods",
                    not any(selects(p["spec"].get("selector"), o) for o in others))

        service_name = spec.get("serviceName")
        headless = services.get(service_name)
        r.check(f"{name}: its serviceName names a Service", headless is not None,
                repr(service_name))
        if headless is not None:
            hs = headless.get("spec", {})
            r.check(f"{name}: Service {service_name} is headless", hs.get("clusterIP") == "None",
                    repr(hs.get("clusterIP")))
            selector = hs.get("selector") or {}
            r.check(f"{name}: Service {service_name} selects exactly its pods",
                    bool(selector) and selects({"matchLabels": selector}, labels) and
                    not any(selects({"matchLabels": selector}, o) for o in others))

        containers = [c for c in pod.get("containers", []) if c.get("name") == SERVER_APP]
        if not r.check(f"{name}: has a container named {SERVER_APP}", len(containers) == 1):
            continue
        c = containers[0]
        args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        flags = {}
        for a in args:
            m = re.fullmatch(r"(--[a-z-]+)=(.*)", a)
            if m:
                flags[m.group(1)] = m.group(2)
        for flag in REQUIRED_ARGS:
            r.check(f"{name}: args carry {flag}...", flag[:-1] in flags, " ".join(args))
        shard = flags.get("--shard", "")
        shards.append(shard)
        r.check(f"{name}: --shard is a plain name", re.fullmatch(r"[a-z0-9-]+", shard) is not None,
                repr(shard))
        r.check(f"{name}: --replica is $(POD_NAME)", flags.get("--replica") == "$(POD_NAME)")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        grpc_adv = flags.get("--advertise-grpc", "")
        http_adv = flags.get("--advertise-http", "")
        r.check(f"{name}: --advertise-grpc is $(POD_NAME).{service_name}...:<grpc port>",
                grpc_adv.startswith(f"$(POD_NAME).{service_name}.") and
                port_of(grpc_adv) == ports.get("grpc"), grpc_adv)
        r.check(f"{name}: --advertise-http is http://$(POD_NAME).{service_name}...:<http port>",
                http_adv.startswith(f"http://$(POD_NAME).{service_name}.") and
                port_of(http_adv) == ports.get("http"), http_adv)
        env = {e.get("name"): e for e in c.get("env", [])}
        for var in sorted(set(re.findall(r"\$\(([A-Z_]+)\)", " ".join(args)))):
            r.check(f"{name}: $({var}) is defined in the container's env", var in env)
        r.check(f"{name}: POD_NAME comes from metadata.name",
                ((env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {})
                .get("fieldPath") == "metadata.name")
        if headless is not None:
            hports = {p.get("name"): p.get("port") for p in headless["spec"].get("ports", [])}
            r.check(f"{name}: headless Service publishes the grpc and http ports",
                    hports.get("grpc") == ports.get("grpc") and
                    hports.get("http") == ports.get("http"), repr(hports))

        mounts = {m.get("mountPath"): m for m in c.get("volumeMounts", [])}
        claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        data_dir = flags.get("--data-dir")
        r.check(f"{name}: --data-dir is on a volumeClaimTemplate",
                data_dir in mounts and mounts[data_dir].get("name") in claims,
                f"--data-dir={data_dir}, claims {sorted(claims)}")

        config_path = flags.get("--config", "")
        volumes = {v.get("name"): v for v in pod.get("volumes", [])}
        config_text = None
        for mount_path, m in mounts.items():
            volume = volumes.get(m.get("name")) or {}
            cm_name = (volume.get("configMap") or {}).get("name")
            if cm_name is None:
                continue
            key = m.get("subPath") if mount_path == config_path else (
                config_path[len(mount_path.rstrip("/")) + 1:]
                if config_path.startswith(mount_path.rstrip("/") + "/") else None)
            if key and cm_name in config_maps:
                config_text = (config_maps[cm_name].get("data") or {}).get(key)
        if r.check(f"{name}: --config is server.json of a ConfigMap mounted in the pod",
                   config_text is not None, f"--config={config_path}"):
            config = parse_server_json(r, f"{name}'s ConfigMap", config_text)
            if config is not None:
                server_configs.append(config)
                check_cluster_section(r, f"{name}'s ConfigMap", config)
                r.check(f"{name}: grpc_listen's port is the container's grpc port",
                        port_of(str(config.get("grpc_listen", ""))) == ports.get("grpc"),
                        repr(config.get("grpc_listen")))
                r.check(f"{name}: http_listen's port is the container's http port",
                        port_of(str(config.get("http_listen", ""))) == ports.get("http"),
                        repr(config.get("http_listen")))
                r.check(f"{name}: http_listen is not loopback-only (peers fan out to it)",
                        not str(config.get("http_listen", "")).startswith("127."))

        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            p = c.get(probe)
            if probe != "startupProbe":
                r.check(f"{name}: has a {probe}", p is not None)
            if p and "httpGet" in p:
                path = p["httpGet"].get("path")
                r.check(f"{name}: {probe} path {path} is served by vigil-server",
                        path in paths_served, f"served: {sorted(paths_served)}")
        requests = (c.get("resources") or {}).get("requests") or {}
        r.check(f"{name}: requests cpu and memory", "cpu" in requests and "memory" in requests,
                repr(requests))

    r.check("shard names are unique across pairs", len(shards) == len(set(shards)), repr(shards))

    front = services.get("vigil")
    if r.check("Service vigil exists", front is not None):
        fs = front["spec"]
        r.check("Service vigil is not headless", fs.get("clusterIP") != "None")
        r.check("Service vigil selects every pair's pods",
                all(selects({"matchLabels": fs.get("selector") or {}}, l)
                    for l in pod_labels.values()))
        fports = {p.get("port"): p.get("targetPort") for p in fs.get("ports", [])}
        r.check("Service vigil serves 8080 (http) and 50051 (grpc)",
                fports.get(8080) == "http" and fports.get(50051) == "grpc", repr(fports))

    etcd = [s for s in statefulsets if s not in pairs and
            "etcd" in s.get("metadata", {}).get("name", "")]
    for sts in etcd:
        name, replicas = sts["metadata"]["name"], sts["spec"].get("replicas")
        r.check(f"etcd {name}: an odd number >= 3 of members",
                isinstance(replicas, int) and replicas >= 3 and replicas % 2 == 1, repr(replicas))
        svc = sts["spec"].get("serviceName")
        members = {f"http://{name}-{i}.{svc}:2379" for i in range(replicas or 0)}
        for config in {json.dumps(c, sort_keys=True): c for c in server_configs}.values():
            endpoints = set((config.get("cluster") or {}).get("etcd_endpoints") or [])
            r.check(f"the config's etcd endpoints are the members of {name}",
                    endpoints == members, f"{sorted(endpoints)} vs {sorted(members)}")


def check_kustomization(r, manifests):
    kust = manifests.get("kustomization.yaml")
    if not r.check("kustomization.yaml exists", bool(kust)):
        return
    resources = set(kust[0].get("resources") or [])
    expected = {f for f in manifests if f != "kustomization.yaml" and "example" not in f}
    r.check("kustomization.yaml lists every manifest but the examples",
            resources == expected,
            f"missing {sorted(expected - resources)}, extra {sorted(resources - expected)}")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("note: no kubectl; `kubectl kustomize` not run")
        return
    out = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True,
                         timeout=60)
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d] if out.returncode == 0 else []
    r.check("kubectl kustomize renders deploy/kubernetes/cluster", out.returncode == 0, out.stderr.strip())
    r.check("the rendered objects are all in namespace vigil",
            all(d.get("kind") == "Namespace" or d["metadata"].get("namespace") == "vigil"
                for d in rendered))


def check_generator(r, manifests):
    script = K8S / "new-pair.sh"
    # A pair's file is vigil-<shard>.yaml holding the StatefulSet vigil-<shard>.
    pairs = sorted(K8S / f for f, docs in manifests.items()
                   if any(d.get("kind") == "StatefulSet" and
                          f == f"{d['metadata']['name']}.yaml" and
                          f.startswith("vigil-") for d in docs))
    r.check("pair files exist", len(pairs) >= 2, repr(pairs))
    for path in pairs:
        shard = path.stem[len("vigil-"):]
        out = subprocess.run(["bash", str(script), shard], capture_output=True, text=True)
        r.check(f"{path.name} is what new-pair.sh {shard} writes",
                out.returncode == 0 and out.stdout == path.read_text(),
                out.stderr.strip() or "differs: regenerate it from pair.yaml.in")
    bad = subprocess.run(["bash", str(script), "S_0"], capture_output=True, text=True)
    r.check("new-pair.sh refuses a bad shard name (exit 2)", bad.returncode == 2)


def check_systemd(r):
    path = SYSTEMD / "vigil-server-cluster.json"
    config = parse_server_json(r, path.name, path.read_text()) if r.check(
        f"{path.name} exists", path.is_file()) else None
    if config is not None:
        check_cluster_section(r, path.name, config)
    env_path = SYSTEMD / "server.env"
    if r.check("server.env exists", env_path.is_file()):
        lines = [l for l in env_path.read_text().splitlines() if l.startswith("VIGIL_SERVER_ARGS=")]
        args = lines[0].split("=", 1)[1].split() if len(lines) == 1 else []
        r.check("server.env has one VIGIL_SERVER_ARGS line", len(lines) == 1)
        for flag in REQUIRED_ARGS:
            r.check(f"server.env passes {flag}...", any(a.startswith(flag) for a in args))

    def settings(text):
        return [l for l in text.splitlines() if l and not l.startswith("#")]

    unit = SYSTEMD / "vigil-server-cluster.service"
    base = SYSTEMD / "vigil-server.service"
    if not r.check(f"{unit.name} exists", unit.is_file()):
        return
    mine, theirs = settings(unit.read_text()), settings(base.read_text())
    r.check(f"{unit.name} reads /etc/vigil/server.env",
            "EnvironmentFile=/etc/vigil/server.env" in mine)
    exec_lines = [l for l in mine if l.startswith("ExecStart=")]
    base_exec = [l for l in theirs if l.startswith("ExecStart=")]
    r.check(f"{unit.name}: ExecStart is vigil-server.service's plus $VIGIL_SERVER_ARGS",
            len(exec_lines) == 1 and len(base_exec) == 1 and
            exec_lines[0] == base_exec[0] + " $VIGIL_SERVER_ARGS", repr(exec_lines))
    skip = ("ExecStart=", "Description=", "After=")
    lost = [l for l in theirs if not l.startswith(skip) and l not in mine]
    r.check(f"{unit.name} keeps every other setting of {base.name}", not lost, repr(lost))
    r.check(f"{unit.name} conflicts with {base.name}", f"Conflicts={base.name}" in mine)


def find(manifests, kind, name):
    for docs in manifests.values():
        for d in docs:
            if d.get("kind") == kind and d["metadata"]["name"] == name:
                return d
    raise KeyError(f"{kind}/{name}")


def server_container(sts):
    return next(c for c in sts["spec"]["template"]["spec"]["containers"]
                if c["name"] == SERVER_APP)


def set_config(manifests, change):
    cm = find(manifests, "ConfigMap", "vigil-config")
    cm["data"]["server.json"] = change(cm["data"]["server.json"])


def cluster_edit(edit):
    def change(text):
        config = json.loads(text)
        edit(config)
        return json.dumps(config)
    return change


def mutations():
    """(what, change) pairs; each change breaks one invariant of a copy."""
    def sts(m):
        return find(m, "StatefulSet", "vigil-s0")

    def args(m):
        return server_container(sts(m))["args"]

    def anti(m):
        return sts(m)["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]

    return [
        ("3 replicas", lambda m: sts(m)["spec"].__setitem__("replicas", 3)),
        ("no required anti-affinity",
         lambda m: anti(m).pop("requiredDuringSchedulingIgnoredDuringExecution")),
        ("anti-affinity on zones only",
         lambda m: anti(m)["requiredDuringSchedulingIgnoredDuringExecution"][0]
         .__setitem__("topologyKey", "topology.kubernetes.io/zone")),
        ("required anti-affinity across all pairs",
         lambda m: anti(m)["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
         ["matchLabels"].pop("app.kubernetes.io/instance")),
        ("PDB maxUnavailable 2",
         lambda m: find(m, "PodDisruptionBudget", "vigil-s0")["spec"]
         .__setitem__("maxUnavailable", 2)),
        ("PDB gone", lambda m: m["vigil-s0.yaml"].remove(find(m, "PodDisruptionBudget", "vigil-s0"))),
        ("PDB over every pair",
         lambda m: find(m, "PodDisruptionBudget", "vigil-s0")["spec"]["selector"]["matchLabels"]
         .pop("app.kubernetes.io/instance")),
        ("Service not headless",
         lambda m: find(m, "Service", "vigil-s0")["spec"].pop("clusterIP")),
        ("serviceName names nothing", lambda m: sts(m)["spec"].__setitem__("serviceName", "nope")),
        ("no --replica", lambda m: args(m).remove("--replica=$(POD_NAME)")),
        ("no --shard", lambda m: args(m).remove(next(a for a in args(m) if a.startswith("--shard=")))),
        ("same shard twice",
         lambda m: server_container(find(m, "StatefulSet", "vigil-s1"))["args"].__setitem__(
             [i for i, a in enumerate(args(m)) if a.startswith("--shard=")][0], "--shard=s0")),
        ("advertise on the wrong port",
         lambda m: args(m).__setitem__(
             [i for i, a in enumerate(args(m)) if a.startswith("--advertise-grpc=")][0],
             "--advertise-grpc=$(POD_NAME).vigil-s0.$(POD_NAMESPACE).svc:7070")),
        ("POD_NAME undefined", lambda m: server_container(sts(m)).__setitem__(
            "env", [e for e in server_container(sts(m))["env"] if e["name"] != "POD_NAME"])),
        ("server.json not JSON", lambda m: set_config(m, lambda t: t + "}")),
        ("no cluster section", lambda m: set_config(m, cluster_edit(lambda c: c.pop("cluster")))),
        ("unknown cluster key",
         lambda m: set_config(m, cluster_edit(lambda c: c["cluster"].__setitem__("etcd", "x")))),
        ("etcd endpoint not a URL",
         lambda m: set_config(m, cluster_edit(
             lambda c: c["cluster"].__setitem__("etcd_endpoints", ["etcd-0.etcd:2379"])))),
        ("liveness on a path the server lacks",
         lambda m: server_container(sts(m))["livenessProbe"]["httpGet"]
         .__setitem__("path", "/api/v1/health")),
        ("data dir not on a claim",
         lambda m: sts(m)["spec"].__setitem__("volumeClaimTemplates", [])),
        ("Service vigil without grpc",
         lambda m: find(m, "Service", "vigil")["spec"].__setitem__(
             "ports", [p for p in find(m, "Service", "vigil")["spec"]["ports"]
                       if p["name"] != "grpc"])),
    ]


def main():
    r = Report(verbose=True)
    manifests = load_manifests()
    r.check("deploy/kubernetes/cluster has manifests", bool(manifests), str(K8S))
    paths_served = served_paths()
    r.check("found the server's HTTP routes in server/**/*.cc", "/healthz" in paths_served,
            repr(sorted(paths_served)))
    check_k8s(r, manifests, paths_served)
    check_kustomization(r, manifests)
    check_generator(r, manifests)
    check_systemd(r)

    # The checks must be able to fail: each broken copy must be reported.
    for what, change in mutations():
        broken = copy.deepcopy(manifests)
        try:
            change(broken)
        except (KeyError, StopIteration, IndexError, ValueError) as e:
            r.check(f"self-test: can break the manifests: {what}", False, repr(e))
            continue
        quiet = Report(verbose=False)
        with contextlib.redirect_stdout(io.StringIO()):
            check_k8s(quiet, broken, paths_served)
        r.check(f"self-test: '{what}' is reported", bool(quiet.failures),
                "; ".join(quiet.failures[:3]))

    if r.failures:
        print(f"{len(r.failures)} of {r.checks} checks failed")
        return 1
    print(f"all {r.checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
