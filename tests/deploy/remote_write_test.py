#!/usr/bin/env python3
"""Remote write to a real VictoriaMetrics, from a real vigil-server.

A simulated node (vigil-agent --simulate) streams into vigil-server, whose
"remote_write" section points at a VictoriaMetrics that is not running yet.
Checks that:
  1. while the endpoint is down, the server keeps ingesting and counts
     failed requests (ingest never waits on remote write);
  2. once VictoriaMetrics is up, the queued raw samples of the chosen
     metric arrive (timestamps from before it started), equal to what
     vigil-server stored;
  3. the 1-minute rollups arrive as <metric>:{min,max,avg,count}_1m with
     the job, node and gpu labels, stamped with the minute's start, and
     agree with vigil-server's own raw points of that minute;
  4. the server stops cleanly (SIGTERM) with remote write configured.
Prints the compressed bytes per sample sent.

Usage: remote_write_test.py BUILD_DIR
Exit 77: no victoria-metrics (deploy/install-deps.sh installs it) or no
vigil-server / vigil-agent under BUILD_DIR.
"""
import json
import shutil
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "drills"))
import lib  # noqa: E402

SRC = Path(__file__).resolve().parents[2]
NODE, JOB = "n001", "rw-test"
RAW_METRIC = "gpu_temperature_celsius"
ROLLUP_METRIC = "gpu_power_watts"
NET_ERRORS = 'vigil_remote_write_requests_total{result="network_error"}'
REQUESTS = "vigil_remote_write_requests_total"
failures = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def export(vm, match):
    """VictoriaMetrics /api/v1/export: [{"metric": {...}, "values": [...], "timestamps": [...]}]."""
    q = urllib.parse.urlencode({"match[]": match})
    status, body = lib.http(f"{vm}/api/v1/export?{q}", timeout=10)
    if status != 200:
        return []
    text = body if isinstance(body, str) else json.dumps(body)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def vigil_points(server, metric, gpu):
    """[(ts, value)] vigil-server stored for NODE's `metric` of `gpu`."""
    for s in server.api(f"/api/v1/series?metric={metric}&node={NODE}")["series"]:
        if str(s.get("labels", {}).get("gpu")) == str(gpu):
            q = server.api(f"/api/v1/query?series={s['id']}&from=0&to=4102444800")
            return [(p[0], p[1]) for p in q["points"]]
    return []


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else str(SRC / "build")
    vm_bin = shutil.which("victoria-metrics")
    if not vm_bin:
        print("SKIP: victoria-metrics is not installed (deploy/install-deps.sh installs it)")
        return 77
    try:
        bins = {name: lib.find_binary(build, name) for name in ("vigil-server", "vigil-agent")}
    except lib.DrillError as e:
        print(f"SKIP: {e}")
        return 77
    env = lib.Env("remote-write", bins)
    try:
        vm_port = lib.free_port()
        vm = f"http://127.0.0.1:{vm_port}"
        cfg = lib.server_config(env, env.dir / "data")
        cfg["remote_write"] = {
            "url": f"{vm}/api/v1/write", "raw_metrics": [RAW_METRIC],
            "flush_seconds": 1, "grace_seconds": 2, "retry_base_seconds": 0.5,
            "retry_max_seconds": 2, "batch_samples": 5000}
        server = lib.Server(env, cfg)
        server.start()
        agent = lib.Agent(env, server.grpc, NODE, JOB, interval=0.5, gpus=2, spool=False,
                          metrics=False)

        # 1. The endpoint is down: ingest goes on, failures are counted.
        ok = lib.wait_until(lambda: server.metrics().get(NET_ERRORS, 0) >= 2, 30, 0.5)
        m = server.metrics()
        check("with VictoriaMetrics down, requests fail and are counted", ok,
              f"network_error={m.get(NET_ERRORS)}")
        frames_before = m.get("vigil_ingest_frames_total", 0)
        time.sleep(2)
        check("ingest goes on meanwhile", server.metrics().get("vigil_ingest_frames_total", 0)
              > frames_before)

        vm_started = time.time()
        vm_proc = env.spawn("victoria-metrics", [
            vm_bin, f"-storageDataPath={env.dir / 'vm'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
            "-loggerLevel=ERROR"])
        if not lib.wait_until(lambda: lib.http(f"{vm}/health", timeout=2)[0] == 200, 30, 0.2):
            check("VictoriaMetrics answers /health", False, vm_proc.tail())
            return 1

        # 2. The raw samples queued while it was down arrive.
        def raw_series():
            return [s for s in export(vm, f'{RAW_METRIC}{{node="{NODE}",gpu="0"}}')
                    if s["metric"].get("job") == JOB]
        check("raw samples of the chosen metric arrive", lib.wait_until(
            lambda: raw_series() and min(raw_series()[0]["timestamps"]) < vm_started * 1000,
            30, 0.5), "including ones queued before VictoriaMetrics started")
        series = raw_series()
        if series:
            sent = dict(zip(series[0]["timestamps"], series[0]["values"]))
            stored = {round(ts * 1000): v for ts, v in vigil_points(server, RAW_METRIC, 0)}
            common = set(sent) & set(stored)
            check("raw samples equal what vigil-server stored",
                  len(common) >= 5 and all(sent[t] == stored[t] for t in common),
                  f"{len(common)} samples compared")

        # 3. Rollups: the first minute whose end + grace has passed arrives.
        def rollups():
            out = {}
            for s in export(vm, f'{{__name__=~"{ROLLUP_METRIC}:.*_1m",node="{NODE}",gpu="0"}}'):
                out[s["metric"]["__name__"]] = s
            return out
        ok = lib.wait_until(lambda: len(rollups()) == 4, 100, 1)
        r = rollups()
        check("rollups arrive as min/max/avg/count_1m", ok, ", ".join(sorted(r)))
        if ok:
            labels = r[f"{ROLLUP_METRIC}:avg_1m"]["metric"]
            check("rollups keep job, node and gpu labels",
                  labels.get("job") == JOB and labels.get("node") == NODE and
                  labels.get("gpu") == "0", json.dumps(labels))
            ts = r[f"{ROLLUP_METRIC}:avg_1m"]["timestamps"][0]
            check("rollups are stamped with their minute's start", ts % 60000 == 0, str(ts))
            points = [v for t, v in vigil_points(server, ROLLUP_METRIC, 0)
                      if ts <= round(t * 1000) < ts + 60000]
            got = {k.split(":")[1]: s["values"][s["timestamps"].index(ts)]
                   for k, s in r.items() if ts in s["timestamps"]}
            want = {"min_1m": min(points), "max_1m": max(points),
                    "avg_1m": sum(points) / len(points), "count_1m": len(points)}
            check("rollups agree with vigil-server's raw points of the minute",
                  set(got) == set(want) and
                  all(abs(got[k] - want[k]) <= 1e-6 * max(1, abs(want[k])) for k in want),
                  f"vm {got} vigil {want}")

        m = server.metrics()
        sent = m.get("vigil_remote_write_samples_sent_total", 0)
        sent_bytes = m.get("vigil_remote_write_sent_bytes_total", 0)
        if sent:
            requests = {k[len(REQUESTS):]: v for k, v in m.items() if k.startswith(REQUESTS)}
            print(f"info: {sent:.0f} samples sent in {sent_bytes:.0f} compressed bytes: "
                  f"{sent_bytes / sent:.1f} B/sample; requests {requests}", flush=True)
        check("nothing dropped", all(v == 0 for k, v in m.items()
                                     if k.startswith("vigil_remote_write_samples_dropped_total")),
              json.dumps({k: v for k, v in m.items() if "dropped" in k and "remote" in k}))

        # 4. A clean stop with remote write configured.
        agent.proc.stop()
        server.proc.stop(timeout=20)
        check("vigil-server stops cleanly on SIGTERM", server.proc.p.returncode == 0,
              f"exit {server.proc.p.returncode}")
    except lib.DrillError as e:
        check("setup", False, str(e))
    finally:
        env.failed = bool(failures)
        env.cleanup()
    print("PASS" if not failures else f"FAILED: {len(failures)} check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
