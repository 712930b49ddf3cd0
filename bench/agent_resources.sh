#!/usr/bin/env bash
# Measures vigil-agent's own CPU and memory on a fully loaded node: the fake
# NVML presenting 8 GPUs (every metric, events on), 8 RDMA ports (copies of
# the ConnectX-7 fixture, with hw_counters), this machine's real /proc
# (diskstats, stat), and 8 training ranks pushing one step per second into
# the training socket. The agent streams to a real vigil-server over
# loopback. CPU = the agent's on-CPU time over the measured window (after a
# warm-up), summed over its threads from /proc/PID/task/*/schedstat
# (nanoseconds; /proc/PID/stat's 10 ms ticks are too coarse for 0.2 %
# of a core); memory at the
# end: RSS (VmRSS; VmHWM = peak), PSS and private (smaps_rollup: RSS counts
# every shared-library page the process has mapped in, PSS divides shared
# pages among their users, private counts only pages of this process).
# Usage:
#   bench/agent_resources.sh BUILD_DIR [RUNS=5] [SECONDS=60] [INTERVALS="1 0.1"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: bench/agent_resources.sh BUILD_DIR [RUNS] [SECONDS] [INTERVALS]}
runs=${2:-5}
seconds=${3:-60}
intervals=${4:-"1 0.1"}
warmup=5
ninja -C "$build" vigil-agent vigil-server fake_nvml >/dev/null
fake_nvml=$(find "$build/tests/agent" -name 'libnvidia-ml.so.1' | head -1)
[[ -n $fake_nvml ]] || { echo "fake NVML not built" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# 8 RDMA ports: mlx5_0..mlx5_7 as copies of the ConnectX-7 RoCE fixture.
mkdir -p "$work/sys/class/infiniband"
for i in $(seq 0 7); do
  cp -r "$root/tests/agent/testdata/sys/class/infiniband/mlx5_1" \
    "$work/sys/class/infiniband/mlx5_$i"
done
ln -s /sys/block "$work/sys/block"

"$build/server/vigil-server" --memory --grpc-insecure --grpc-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --no-detect >"$work/server.out" 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 100); do
  grep -q "ingest" "$work/server.out" 2>/dev/null && break
  sleep 0.1
done
gport=$(sed -n 's/.*ingest ([^)]*) on 127.0.0.1:\([0-9]*\),.*/\1/p' "$work/server.out" | head -1)
[[ -n $gport ]] || { echo "server did not start:" >&2; cat "$work/server.log" >&2; exit 1; }

# Eight ranks, one step per second each, through the real client library.
cat >"$work/ranks.py" <<'PY'
import math, os, sys, time
sys.path.insert(0, sys.argv[1])
import vigil
clients = [vigil.Client(job="bench", socket=sys.argv[2], rank=r, local_rank=r,
                        world_size=64, gpu=r) for r in range(8)]
step = 0
while True:
    step += 1
    for c in clients:
        c.step(step, loss=2.0 + math.sin(step / 50.0), grad_norm=0.9,
               tokens_per_second=16000.0, step_time_seconds=1.0,
               dataloader_wait_seconds=0.01, mfu_ratio=0.41,
               torch_reserved_bytes=7.0e10, torch_allocated_bytes=6.5e10,
               torch_alloc_retries_total=0)
    time.sleep(1.0)
PY

run_once() {  # interval -> "cpu_percent rss_mb hwm_mb series"
  local interval=$1 sock=$work/train.sock
  FAKE_NVML_GPUS=8 "$build/agent/vigil-agent" --server "127.0.0.1:$gport" \
    --insecure --node bench-n001 --interval "$interval" \
    --nvml-library "$fake_nvml" --sysfs-root "$work/sys" --proc-root /proc \
    --training-socket "$sock" --metrics-listen 127.0.0.1:0 \
    2>"$work/agent.log" &
  local agent=$!
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
  /usr/bin/python3 "$work/ranks.py" "$root/python" "$sock" 2>>"$work/ranks.log" &
  local feeder=$!
  sleep "$warmup"
  local ns0 ns1
  ns0=$(cat /proc/"$agent"/task/*/schedstat | awk '{s += $1} END {print s}')
  sleep "$seconds"
  ns1=$(cat /proc/"$agent"/task/*/schedstat | awk '{s += $1} END {print s}')
  local rss hwm pss private
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$agent/status")
  pss=$(awk '/^Pss:/ {print $2}' "/proc/$agent/smaps_rollup")
  private=$(awk '/^Private_(Clean|Dirty):/ {s += $2} END {print s}' "/proc/$agent/smaps_rollup")
  kill "$feeder" 2>/dev/null || true
  kill -TERM "$agent"
  wait "$agent" 2>/dev/null || true
  wait "$feeder" 2>/dev/null || true
  awk -v t0="$ns0" -v t1="$ns1" -v s="$seconds" \
      -v rss="$rss" -v hwm="$hwm" -v pss="$pss" -v priv="$private" 'BEGIN {
    printf "cpu_percent=%.3f rss_mb=%.1f hwm_mb=%.1f pss_mb=%.1f private_mb=%.1f\n",
      100 * (t1 - t0) / 1e9 / s, rss / 1024, hwm / 1024, pss / 1024, priv / 1024 }'
}

for interval in $intervals; do
  results=()
  for i in $(seq "$runs"); do
    r=$(run_once "$interval")
    echo "interval=${interval}s run $i: $r"
    results+=("$r")
  done
  printf '%s\n' "${results[@]}" | python3 -c '
import re, statistics, sys
rows = [dict(re.findall(r"(\w+)=([0-9.?]+)", l)) for l in sys.stdin if l.strip()]
med = lambda k: statistics.median(float(r[k]) for r in rows)
print("interval=%ss median of %d runs: cpu %.3f %% of one core, RSS %.1f MB (peak %.1f), PSS %.1f MB, private %.1f MB" % (
    sys.argv[1], len(rows), med("cpu_percent"), med("rss_mb"), med("hwm_mb"),
    med("pss_mb"), med("private_mb")))
' "$interval"
done
