#!/usr/bin/env python3
"""Vigil fed by a real Prometheus, end to end on loopback.

Fixture exporters imitate dcgm-exporter (two GPU nodes, 4 GPUs each, the
HPC job mapping's `hpc_job` label) and node_exporter (InfiniBand counters).
A real Prometheus 2.42 (Debian `prometheus`):

- scrapes them every second;
- remote-writes into vigil-server's POST /api/v1/write with a token of the
  remote_write role;
- scrapes vigil-server's own /metrics.

The test checks, in order:
  1. Vigil stores the series under its own names, for the job and nodes the
     labels name, and Prometheus sees Vigil's self-metrics (up == 1, the
     receiver's sample count > 0).
  2. A healthy stretch opens no P0-P2 incident.
  3. A fault in the fixture (one GPU's power 80 W below its peers) opens the
     P2 gpu_power_low on that GPU, and a DCGM XID opens the XID red line.
  4. Nodes fed by remote write are marked as such; a node whose own
     vigil-agent scrapes its dcgm-exporter (the exporter collector) is an
     agent's node, its series under Vigil's names.
  5. Alertmanager both ways (a real Alertmanager 0.25): Vigil's incidents
     are alerts in it (vigil_incident label); it routes every alert to
     Vigil's webhook, where Vigil's own are dropped (nothing loops) and a
     Prometheus rule's alert (a GPU too hot) becomes an incident that
     resolves when the rule does.

Usage: prometheus_e2e.py BUILD_DIR
Exit 0 on success; the reason on stderr otherwise. Skips (exit 77) without
the prometheus or prometheus-alertmanager binaries.
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "e2e-remote-write-token"
JOB = "8812"
NODES = ["gpu-a", "gpu-b"]
GPUS = 4

# Fault injection, changed by the test: (node, gpu) -> watts below normal;
# (node, gpu) -> last XID code.
STATE = {"drop": {}, "xid": {}, "temp": {}, "tick": 0}
LOCK = threading.Lock()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dcgm_text(node):
    """A dcgm-exporter page for `node` (its own Hostname label)."""
    with LOCK:
        drop = dict(STATE["drop"])
        xid = dict(STATE["xid"])
        temp = dict(STATE["temp"])
        STATE["tick"] += 1
        tick = STATE["tick"]
    lines = []
    families = [
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ]
    for name, kind, help_text in families:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for g in range(GPUS):
            labels = (f'gpu="{g}",UUID="GPU-{node}-{g}",device="nvidia{g}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",'
                      f'hpc_job="{JOB}"')
            # Deterministic "noise": the test must not flake on a draw.
            wiggle = ((tick * 7 + g * 13) % 11) - 5
            if name == "DCGM_FI_DEV_POWER_USAGE":
                value = 650 + g + wiggle - drop.get((node, g), 0)
            elif name == "DCGM_FI_DEV_GPU_TEMP":
                value = temp.get((node, g), 63 + g % 2)
            elif name == "DCGM_FI_DEV_SM_CLOCK":
                value = 1980
            elif name == "DCGM_FI_DEV_GPU_UTIL":
                value = 100
            elif name == "DCGM_FI_DEV_FB_USED":
                value = 70000 + g
            else:
                value = xid.get((node, g), 0)
            lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def node_exporter_text(node):
    with LOCK:
        tick = STATE["tick"]
    return (
        "# HELP node_infiniband_port_data_received_bytes_total Number of data octets received.\n"
        "# TYPE node_infiniband_port_data_received_bytes_total counter\n"
        f'node_infiniband_port_data_received_bytes_total{{device="mlx5_0",port="1"}} {tick * 4.0e9}\n'
        "# HELP node_infiniband_port_errors_received_total Number of packets containing an error.\n"
        "# TYPE node_infiniband_port_errors_received_total counter\n"
        'node_infiniband_port_errors_received_total{device="mlx5_0",port="1"} 0\n'
        "# HELP go_goroutines Number of goroutines that currently exist.\n"
        "# TYPE go_goroutines gauge\n"
        "go_goroutines 12\n")


class Exporter(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        kind, node = self.server.kind, self.server.node
        body = (dcgm_text(node) if kind == "dcgm" else node_exporter_text(node)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_exporter(kind, node):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    server.kind, server.node = kind, node
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


# Where to look when a wait fails: vigil-server's HTTP address.
VIGIL_URL = None


def diagnostics():
    """What vigil-server says about itself, for a failure message."""
    if VIGIL_URL is None:
        return ""
    out = []
    try:
        with urllib.request.urlopen(VIGIL_URL + "/metrics", timeout=5) as r:
            out += [line for line in r.read().decode().splitlines()
                    if line.startswith("vigil_remote_write_receiver")]
        incidents = get_json(VIGIL_URL + "/api/v1/incidents?state=all")["incidents"]
        out += [f"incident {i['id']} {i['severity']} {i['kind']} node={i['node']} "
                f"gpu={i['gpu']}: {i['summary']}" for i in incidents]
    except Exception as e:  # the server may be gone
        out.append(f"(no diagnostics: {e})")
    return "\n".join(out)


def wait_for(what, check, timeout):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # the service may still be starting
            last = e
        time.sleep(0.5)
    raise SystemExit(f"FAIL: {what} within {timeout} s (last: {last})\n{diagnostics()}")


def main():
    build = os.path.abspath(sys.argv[1])
    prometheus = shutil.which("prometheus")
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if prometheus is None or alertmanager is None:
        print("SKIP: no prometheus or alertmanager binary (deploy/install-deps.sh installs them)")
        return 77
    tmp = tempfile.mkdtemp(prefix="vigil-prom-e2e-")
    procs = []
    try:
        http_port, grpc_port, prom_port, am_port = free_port(), free_port(), free_port(), free_port()
        am_url = f"http://127.0.0.1:{am_port}"
        vigil_url = f"http://127.0.0.1:{http_port}"
        global VIGIL_URL
        VIGIL_URL = vigil_url
        config = {
            "auth": {"anonymous_read": True,
                     "tokens": [{"name": "prometheus", "role": "remote_write",
                                 "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}]},
            # One-second scrapes: frames are whole a couple of seconds after
            # their scrape. A short warm-up and re-warm (a run's first 10 min
            # and 90 s are out of comparisons) so the test need not wait.
            # Peer comparison then also waits for 200 residual changes of
            # the job (8 GPUs: 25 s) before it judges.
            "remote_write_receiver": {"frame_grace_seconds": 2},
            "detection": {"warmup_steps": 5, "warmup_max_seconds": 5, "rewarm_seconds": 5},
            "alertmanager": {"forward_urls": [am_url], "check_seconds": 1,
                             "min_severity": "P2", "intake": {"enabled": True}},
        }
        with open(os.path.join(tmp, "vigil.json"), "w") as f:
            json.dump(config, f)
        vigil_log = open(os.path.join(tmp, "vigil.log"), "w")
        procs.append(subprocess.Popen(
            [os.path.join(build, "server", "vigil-server"), "--memory", "--grpc-insecure",
             "--grpc-listen", f"127.0.0.1:{grpc_port}",
             "--http-listen", f"127.0.0.1:{http_port}",
             "--config", os.path.join(tmp, "vigil.json")],
            stdout=vigil_log, stderr=subprocess.STDOUT))
        wait_for("vigil-server answers /healthz",
                 lambda: get_json(vigil_url + "/healthz")["status"] == "ok", 30)

        exporters = [start_exporter("dcgm", n) for n in NODES]
        node_exporters = [start_exporter("node", n) for n in NODES]
        with open(os.path.join(tmp, "token"), "w") as f:
            f.write(TOKEN)
        targets_dcgm = [f"127.0.0.1:{e.server_address[1]}" for e in exporters]
        node_targets = "\n".join(
            f"      - targets: ['127.0.0.1:{e.server_address[1]}']\n"
            f"        labels: {{Hostname: '{n}'}}"
            for e, n in zip(node_exporters, NODES))
        with open(os.path.join(tmp, "rules.yml"), "w") as f:
            f.write("""
groups:
  - name: gpu
    interval: 1s
    rules:
      - alert: GpuTooHot
        expr: DCGM_FI_DEV_GPU_TEMP > 85
        labels: {severity: critical}
        annotations: {summary: "GPU {{ $labels.gpu }} of {{ $labels.Hostname }} is too hot"}
""")
        with open(os.path.join(tmp, "alertmanager.yml"), "w") as f:
            f.write(f"""
route:
  receiver: vigil
  group_by: [alertname, vigil_incident, Hostname, gpu]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1m
receivers:
  - name: vigil
    webhook_configs:
      - url: {vigil_url}/api/v1/alerts
        send_resolved: true
        http_config:
          authorization: {{credentials_file: {tmp}/token}}
""")
        am_log = open(os.path.join(tmp, "alertmanager.log"), "w")
        procs.append(subprocess.Popen(
            [alertmanager, f"--config.file={tmp}/alertmanager.yml",
             f"--storage.path={tmp}/am", f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address="],
            stdout=am_log, stderr=subprocess.STDOUT))
        prom_config = f"""
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [{tmp}/rules.yml]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:{am_port}']
scrape_configs:
  - job_name: dcgm-exporter
    static_configs:
      - targets: {json.dumps(targets_dcgm)}
  - job_name: node
    static_configs:
{node_targets}
  - job_name: vigil
    static_configs:
      - targets: ['127.0.0.1:{http_port}']
remote_write:
  - url: {vigil_url}/api/v1/write
    authorization:
      credentials_file: {tmp}/token
    queue_config:
      batch_send_deadline: 1s
      max_samples_per_send: 100
      min_backoff: 100ms
      max_backoff: 1s
"""
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write(prom_config)
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={tmp}/prometheus.yml",
             f"--storage.tsdb.path={tmp}/tsdb", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT))
        prom_url = f"http://127.0.0.1:{prom_port}"

        # 1. Series under Vigil's names, for the job and nodes of the labels.
        def series_ready():
            s = get_json(f"{vigil_url}/api/v1/series?job={JOB}&limit=1000")["series"]
            names = {(x["metric"], x["labels"].get("node")) for x in s}
            want = {(m, n) for m in ("gpu_power_watts", "gpu_temperature_celsius",
                                     "gpu_xid_last", "gpu_xid_errors_total") for n in NODES}
            return want <= names and s
        series = wait_for("Vigil stores the dcgm series under its names", series_ready, 60)
        for x in series:
            if "UUID" in x["labels"] or "modelName" in x["labels"]:
                raise SystemExit(f"FAIL: exporter labels kept: {x}")
        # node_exporter's series name no job: they take their node's (a
        # node scraped before its dcgm-exporter starts as idle).
        wait_for("node_exporter series under the node's job",
                 lambda: all(any(x["labels"].get("node") == n and x["labels"].get("job") == JOB
                                 for x in get_json(f"{vigil_url}/api/v1/series?"
                                                   "metric=net_rx_bytes_total")["series"])
                             for n in NODES), 30)
        print(f"ok: {len(series)} series of job {JOB} stored under Vigil's names")

        def prom_query(q):
            r = get_json(f"{prom_url}/api/v1/query?query={urllib.parse.quote(q)}")
            return r["data"]["result"]
        wait_for("Prometheus scrapes Vigil's /metrics",
                 lambda: any(float(x["value"][1]) > 0 for x in prom_query(
                     'vigil_remote_write_receiver_samples_total{outcome="stored"}')), 60)
        if prom_query('up{job="vigil"}')[0]["value"][1] != "1":
            raise SystemExit("FAIL: up{job=\"vigil\"} is not 1")
        print("ok: Prometheus scrapes Vigil's self-metrics")

        # 2. A healthy stretch: nothing of P0-P2.
        time.sleep(25)
        bad = get_json(f"{vigil_url}/api/v1/incidents?state=all&severity=P0,P1,P2")["incidents"]
        if bad:
            raise SystemExit(f"FAIL: healthy stretch raised {json.dumps(bad, indent=1)}")
        print("ok: 25 s healthy, no P0-P2")

        # 3. One GPU 80 W below its peers -> P2 gpu_power_low on it.
        with LOCK:
            STATE["drop"][("gpu-b", 2)] = 80
        t0 = time.time()

        def power_incident():
            for i in get_json(f"{vigil_url}/api/v1/incidents?state=firing")["incidents"]:
                if i["kind"] == "gpu_power_low" and i["node"] == "gpu-b" and i["gpu"] == 2:
                    return i
        inc = wait_for("P2 gpu_power_low on gpu-b GPU 2", power_incident, int(os.environ.get("E2E_WAIT", "60")))
        if inc["severity"] != "P2":
            raise SystemExit(f"FAIL: gpu_power_low is {inc['severity']}, not P2")
        print(f"ok: {inc['id']} {inc['severity']} {inc['kind']} after {time.time() - t0:.1f} s")

        # ... and a DCGM XID -> the XID red line.
        with LOCK:
            STATE["xid"][("gpu-a", 1)] = 79
        t0 = time.time()

        def xid_incident():
            for i in get_json(f"{vigil_url}/api/v1/incidents?state=firing")["incidents"]:
                if i["node"] == "gpu-a" and i["gpu"] == 1 and "xid" in i["kind"]:
                    return i
        inc = wait_for("an XID incident on gpu-a GPU 1", xid_incident, 60)
        print(f"ok: {inc['id']} {inc['severity']} {inc['kind']} after {time.time() - t0:.1f} s")

        # 4. Claimed nodes: the API says where they come from.
        nodes = get_json(f"{vigil_url}/api/v1/nodes")["nodes"]
        sources = {n["node"]: n.get("source") for n in nodes}
        if sources.get("gpu-a") != "remote_write":
            raise SystemExit(f"FAIL: /api/v1/nodes sources: {sources}")
        print("ok: nodes fed by remote write are marked so")

        # A node that keeps DCGM: its agent scrapes the local exporter.
        agent_exporter = start_exporter("dcgm", "gpu-c")
        agent_conf = os.path.join(tmp, "agent.json")
        with open(agent_conf, "w") as f:
            json.dump({"collectors": {"exporter": {
                "enabled": True,
                "urls": [f"http://127.0.0.1:{agent_exporter.server_address[1]}/metrics"]}}}, f)
        agent_log = open(os.path.join(tmp, "agent.log"), "w")
        procs.append(subprocess.Popen(
            [os.path.join(build, "agent", "vigil-agent"), "--server", f"127.0.0.1:{grpc_port}",
             "--insecure", "--node", "gpu-c", "--config", agent_conf,
             "--collectors", "exporter"],
            stdout=agent_log, stderr=subprocess.STDOUT))

        def agent_node():
            nodes = {n["node"]: n for n in get_json(f"{vigil_url}/api/v1/nodes")["nodes"]}
            series = get_json(f"{vigil_url}/api/v1/series?node=gpu-c&metric=gpu_power_watts")
            return (nodes.get("gpu-c", {}).get("source") == "agent" and
                    len(series["series"]) == GPUS)
        wait_for("gpu-c's agent streaming its dcgm-exporter's series", agent_node, 30)
        print("ok: an agent scraping its node's dcgm-exporter streams Vigil's series")

        # 5. Alertmanager both ways.
        power_id = power_incident()["id"]

        def in_alertmanager():
            for a in get_json(f"{am_url}/api/v2/alerts"):
                if a["labels"].get("vigil_incident") == power_id:
                    return a
        a = wait_for(f"{power_id} as an alert in Alertmanager", in_alertmanager, 30)
        if a["labels"].get("alertname") != "gpu_power_low" or a["labels"].get("node") != "gpu-b":
            raise SystemExit(f"FAIL: Alertmanager holds {a['labels']}")
        print(f"ok: {power_id} is an alert in Alertmanager: {a['labels']}")

        def metric(name):
            with urllib.request.urlopen(vigil_url + "/metrics", timeout=5) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + " "):
                        return float(line.split()[-1])
            return 0.0
        wait_for("Vigil's own alerts coming back from Alertmanager dropped",
                 lambda: metric('vigil_alert_intake_alerts_total{outcome="looped"}') > 0, 30)
        looped = [i for i in get_json(f"{vigil_url}/api/v1/incidents?state=all")["incidents"]
                  if i["kind"].startswith("alert:") and "vigil" not in i["kind"]
                  and i["kind"] != "alert:GpuTooHot"]
        if looped:
            raise SystemExit(f"FAIL: Vigil's own alerts came back as incidents: {looped}")
        print("ok: Vigil's own alerts come back from Alertmanager and are dropped")

        with LOCK:
            STATE["temp"][("gpu-a", 0)] = 95
        t0 = time.time()

        def hot_incident():
            for i in get_json(f"{vigil_url}/api/v1/incidents?state=all")["incidents"]:
                if i["kind"] == "alert:GpuTooHot" and i["node"] == "gpu-a":
                    return i
        inc = wait_for("the Prometheus rule's alert as a Vigil incident", hot_incident, 60)
        if inc["severity"] != "P1" or inc["job"] != JOB or inc["gpu"] != 0:
            raise SystemExit(f"FAIL: the rule's incident is {json.dumps(inc)}")
        print(f"ok: Prometheus rule GpuTooHot -> Alertmanager -> {inc['id']} {inc['severity']} "
              f"after {time.time() - t0:.1f} s")
        with LOCK:
            STATE["temp"].pop(("gpu-a", 0))
        wait_for("the rule's incident resolved with the rule",
                 lambda: get_json(f"{vigil_url}/api/v1/incidents/{inc['id']}")["state"]
                 == "resolved", 60)
        print(f"ok: {inc['id']} resolved when the rule did")
        return 0
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.environ.get("KEEP_TMP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
