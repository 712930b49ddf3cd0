#!/usr/bin/env bash
# Vigil against Prometheus 2.42 on identical data, several runs per request
# size, medians printed (bench/vs_prometheus.cc says what is measured).
# Usage: bench/vs-prometheus/run.sh [BUILD_DIR] [RUNS] [NODES] [FRAMES]
#   defaults: build 3 16 900 (16 nodes x 8 GPUs, 15 min at 1 Hz)
set -euo pipefail
build=${1:-build}
runs=${2:-3}
nodes=${3:-16}
frames=${4:-900}
prometheus=$(command -v prometheus || true)
if [ -z "$prometheus" ]; then
  echo "vs-prometheus: no prometheus binary (deploy/install-deps.sh installs it)" >&2
  exit 2
fi
out=$(mktemp -d /tmp/vigil-vs-prometheus.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$prometheus" --version 2>&1 | head -1
for batch in 1 60; do
  for run in $(seq 1 "$runs"); do
    "$build/bench/vs_prometheus" --server-bin="$build/server/vigil-server" \
      --prometheus-bin="$prometheus" --nodes="$nodes" --frames="$frames" \
      --batch-frames="$batch" --dir="$out/run" | tee -a "$out/batch$batch.txt"
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
out = sys.argv[1]
def field(line, name):
    m = re.search(name + r"=([0-9.]+)", line)
    return float(m.group(1)) if m else float("nan")
for batch in (1, 60):
    lines = open(f"{out}/batch{batch}.txt").read().splitlines()
    rows = {}
    for who in ("vigil", "prometheus", "ratio"):
        rows[who] = [l for l in lines if l.startswith(who)]
    def med(who, name):
        return statistics.median(field(l, name) for l in rows[who])
    print(f"\n## one request = {batch} node-tick(s); medians of {len(rows['vigil'])} runs")
    print("| | Vigil | Prometheus 2.42 | ratio |")
    print("|---|---|---|---|")
    v, p = med("vigil", "cpu_s_per_M"), med("prometheus", "cpu_s_per_M")
    print(f"| server CPU s per million samples | {v:.3f} | {p:.3f} | Vigil uses {p / v:.1f}x less |")
    v, p = med("vigil", "bytes_per_sample"), med("prometheus", "bytes_per_sample")
    print(f"| bytes on disk per sample | {v:.3f} | {p:.3f} | {v / p:.2f}x |")
    v, p = med("vigil", "rss_per_series"), med("prometheus", "rss_per_series")
    print(f"| RSS growth per active series (bytes) | {v:.0f} | {p:.0f} | {v / p:.2f}x |")
PY
