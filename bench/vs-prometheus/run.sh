#!/usr/bin/env bash
# Vigil against Prometheus 2.42 (+ Alertmanager 0.25) on identical data,
# several runs of each part, medians printed. bench/vs_prometheus.cc and
# bench/alert_latency.cc say what is measured; bench/RESULTS.md has results.
# Usage: bench/vs-prometheus/run.sh [BUILD_DIR] [RUNS] [NODES] [FRAMES] [PARTS]
#   defaults: build 3 8 1800 ingest,noisy,latency (8 nodes x 8 GPUs, 30 min at 1 Hz:
#   most samples are in closed blocks by the end)
#   ingest:  CPU, bytes and memory per sample at 1 and 60 node-ticks per request
#   noisy:   the same at 1 node-tick per request on noisier samples, with
#            their entropy (bench/noisy_data.h)
#   latency: fault -> notification, Prometheus and Alertmanager with default
#            and with tuned intervals (~4 and ~2.5 min a run)
set -euo pipefail
build=${1:-build}
runs=${2:-3}
nodes=${3:-8}
frames=${4:-1800}
parts=${5:-ingest,noisy,latency}
prometheus=$(command -v prometheus || true)
alertmanager=$(command -v prometheus-alertmanager || command -v alertmanager || true)
if [ -z "$prometheus" ] || { [[ $parts == *latency* ]] && [ -z "$alertmanager" ]; }; then
  echo "vs-prometheus: no prometheus or alertmanager binary (deploy/install-deps.sh installs them)" >&2
  exit 2
fi
out=$(mktemp -d /tmp/vigil-vs-prometheus.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$prometheus" --version 2>&1 | head -1
ingest() {  # NAME, then vs_prometheus flags
  local name=$1
  shift
  for run in $(seq 1 "$runs"); do
    "$build/bench/vs_prometheus" --server-bin="$build/server/vigil-server" \
      --prometheus-bin="$prometheus" --nodes="$nodes" --frames="$frames" \
      --dir="$out/run" "$@" | tee -a "$out/$name.txt"
  done
}
if [[ $parts == *ingest* ]]; then
  ingest batch1 --batch-frames=1
  ingest batch60 --batch-frames=60
fi
[[ $parts == *noisy* ]] && ingest noisy --batch-frames=1 --noisy
if [[ $parts == *latency* ]]; then
  for intervals in default tuned; do
    for run in $(seq 1 "$runs"); do
      "$build/bench/alert_latency" --server-bin="$build/server/vigil-server" \
        --prometheus-bin="$prometheus" --alertmanager-bin="$alertmanager" \
        --intervals=$intervals --dir="$out/latency" | tee -a "$out/latency-$intervals.txt"
    done
  done
fi
python3 - "$out" <<'PY'
import os, re, statistics, sys
out = sys.argv[1]
def field(line, name):
    m = re.search(r"\b" + name + r"=([0-9.]+|nan)", line)
    return float(m.group(1)) if m else float("nan")
def lines(name):
    path = f"{out}/{name}.txt"
    return open(path).read().splitlines() if os.path.exists(path) else []
for name, title in (("batch1", "one request = 1 node-tick"), ("batch60", "one request = 60 node-ticks"),
                    ("noisy", "noisier samples, one request = 1 node-tick")):
    text = lines(name)
    if not text:
        continue
    rows = {who: [l for l in text if l.startswith(who)] for who in ("vigil ", "prometheus ", "nodes=")}
    def med(who, key):
        return statistics.median(field(l, key) for l in rows[who])
    print(f"\n## {title}; medians of {len(rows['vigil '])} runs")
    print("| | Vigil | Prometheus 2.42 | ratio |")
    print("|---|---|---|---|")
    v, p = med("vigil ", "cpu_s_per_M"), med("prometheus ", "cpu_s_per_M")
    print(f"| server CPU s per million samples | {v:.3f} | {p:.3f} | Vigil uses {p / v:.1f}x less |")
    v, p = med("vigil ", "bytes_per_sample"), med("prometheus ", "bytes_per_sample")
    e = med("nodes=", "entropy_bytes_per_sample")
    print(f"| bytes on disk per sample (blocks + index) | {v:.3f} | {p:.3f} | {v / p:.2f}x |")
    print(f"| the same over the samples' entropy ({e:.3f} B) | {v / e:.2f}x | {p / e:.2f}x | |")
    v = med("vigil ", "dir_bytes_per_sample")
    print(f"| Vigil's whole data dir per sample | {v:.3f} | | |")
    v, p = med("vigil ", "rss_per_series"), med("prometheus ", "rss_per_series")
    print(f"| RSS growth per active series (bytes) | {v:.0f} | {p:.0f} | {v / p:.2f}x |")
for intervals in ("default", "tuned"):
    text = lines(f"latency-{intervals}")
    if not text:
        continue
    print(f"\n## fault -> notification, Prometheus + Alertmanager with {intervals} intervals; "
          f"medians over runs of each run's median")
    print("| fault | Vigil p50 | Vigil max | Prometheus + AM p50 | Prometheus + AM max | ratio (p50) | found (Vigil / Prom.) |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("red_line", "power_drop"):
        rows = [l for l in text if l.startswith(kind + " ")]
        if not rows:
            continue
        med = lambda key: statistics.median(field(l, key) for l in rows)
        found = lambda who: "+".join(re.search(who + r"_found=(\d+/\d+)", l).group(1) for l in rows)
        print(f"| {kind} | {med('vigil_p50_ms'):.0f} ms | {med('vigil_max_ms'):.0f} ms | "
              f"{med('prometheus_p50_ms'):.0f} ms | {med('prometheus_max_ms'):.0f} ms | "
              f"{med('prometheus_p50_ms') / med('vigil_p50_ms'):.0f}x | {found('vigil')} / {found('prometheus')} |")
    false_pages = sum(int(field(l, "false_pages")) for l in text if l.startswith("false_pages"))
    print(f"\nfalse pages over the runs: {false_pages}")
PY
