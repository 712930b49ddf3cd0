#!/usr/bin/env bash
# Runs bench/ingest_bench RUNS times against the real vigil-server and prints
# each run plus the median of every figure. Usage:
#   bench/run_ingest.sh [BUILD_DIR] [RUNS] [extra ingest_bench flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
runs=${2:-5}
shift 2 || shift $# || true
ninja -C "$build" ingest_bench vigil-server >/dev/null
out=$(mktemp)
for i in $(seq "$runs"); do
  "$build/bench/ingest_bench" --server-bin="$build/server/vigil-server" "$@" 2>/dev/null | tee -a "$out"
  echo
done
python3 - "$out" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    for key, value in re.findall(r'([a-z_0-9/]+)=([0-9.]+)', line):
        runs.setdefault(key, []).append(float(value))
print("median of %d runs:" % len(runs.get("samples_per_cpu_s", [])))
for k, v in runs.items():
    if k in ("nodes", "frames/node", "batch_frames", "window", "samples", "exit", "stream_ok", "query_points", "disk_bytes"):
        continue
    print("  %-22s %s" % (k, "%.3f" % statistics.median(v)))
PY
rm -f "$out"
