#!/usr/bin/env bash
# What a vigil-server holds when it restarts while its jobs' baselines
# learn: 1,250 nodes streamed by four cluster_load processes for
# LOAD_SECONDS, SIGTERM (the last detection snapshot is written; or SIGKILL,
# a crash: the frame log is replayed and the last minute's snapshot read),
# start again on the same data dir, the same load for AFTER_SECONDS, RSS
# sampled every 0.2 s from the restart and the heap in use (the server's
# vigil_heap_in_use_bytes) every second. bench/RESULTS.md ("The snapshot's
# spike", "Restarts, split") has the results. The heap count makes the
# server walk its allocator's free lists each second; a run without it had
# the same acks and RSS within a run's spread.
# Usage: bench/cluster-load/restart.sh [BUILD_DIR] [LOAD_SECONDS] [AFTER_SECONDS] [SERVER_CONFIG]
#   defaults: build 660 180 (none); the results used a config with
#   {"detection": {"learn_steps": 400, "warmup_steps": 100}} so that the
#   snapshot holds learning samples at the stop.
#   GRPC_PORT, HTTP_PORT (environment; 17290, 18290); STOP_SIGNAL (TERM or
#   KILL; TERM).
set -euo pipefail
build=${1:-build}
load_seconds=${2:-660}
after_seconds=${3:-180}
config=${4:-}
for v in "$load_seconds" "$after_seconds"; do
  [[ $v =~ ^[0-9]+$ && $v -ge 60 ]] || { echo "restart: SECONDS must be >= 60" >&2; exit 2; }
done
[ -z "$config" ] || [ -r "$config" ] || { echo "restart: cannot read SERVER_CONFIG $config" >&2; exit 2; }
for bin in server/vigil-server bench/cluster_load; do
  [ -x "$build/$bin" ] || { echo "restart: no $build/$bin (build it first)" >&2; exit 2; }
done
stop_signal=${STOP_SIGNAL:-TERM}
[[ $stop_signal == TERM || $stop_signal == KILL ]] || { echo "restart: STOP_SIGNAL must be TERM or KILL" >&2; exit 2; }
grpc_port=${GRPC_PORT:-17290}
http_port=${HTTP_PORT:-18290}
out=$(mktemp -d /tmp/vigil-restart.XXXXXX)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  pkill -f "cluster_load --server=127.0.0.1:$grpc_port" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
config_arg=()
[ -z "$config" ] || config_arg=(--config="$config")
start_server() {
  "$build/server/vigil-server" --data-dir="$out/data" --grpc-insecure "${config_arg[@]}" \
    --grpc-listen=127.0.0.1:$grpc_port --http-listen=127.0.0.1:$http_port >>"$out/server.log" 2>&1 &
  server_pid=$!
}
wait_up() {
  for _ in $(seq 1 600); do
    curl -fsS "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "restart: server did not come up" >&2; cat "$out/server.log" >&2; exit 1
}
# 1,250 nodes in four processes, as bench/cluster-load/run.sh splits them.
run_load() {
  local pids=() first=1
  for n in 313 313 313 311; do
    "$build/bench/cluster_load" --server=127.0.0.1:$grpc_port --http-port=$http_port \
      --first-node=$first --nodes=$n --seconds="$1" --fault-nodes=0 >"$out/load.$first.txt" 2>&1 &
    pids+=($!)
    first=$(( first + n ))
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "restart: a load process failed" >&2; cat "$out"/load.*.txt >&2; exit 1; }; done
}
rss_mib() { awk '/^VmRSS/ {printf "%d", $2 / 1024}' "/proc/$server_pid/status"; }
metric() { curl -fsS -m 2 "http://127.0.0.1:$http_port/metrics?heap=1" | awk -v m="$1" '$1 == m {print $2}'; }

start_server; wait_up
run_load "$load_seconds"
echo "before the stop: rss_mib=$(rss_mib) heap_mib=$(metric vigil_heap_in_use_bytes | awk '{printf "%d", $1 / 1048576}') snapshot_bytes=$(metric vigil_detection_snapshot_bytes) frame_log_bytes=$(metric vigil_frame_log_bytes)"
kill -"$stop_signal" "$server_pid"; wait "$server_pid" || true
echo "frame log at the restart: $(cat "$out"/data/frames-*.log 2>/dev/null | wc -c) bytes"
echo "snapshot file: $(stat -c %s "$out/data/state/detection" 2>/dev/null || echo none) bytes"
start_server
t0=$(date +%s.%N)
( while kill -0 "$server_pid" 2>/dev/null; do
    awk -v t0="$t0" -v now="$(date +%s.%N)" '/^VmRSS/ {printf "%.1f %d\n", now - t0, $2 / 1024}' \
      "/proc/$server_pid/status" 2>/dev/null || true
    sleep 0.2
  done ) >"$out/rss.txt" &
( while kill -0 "$server_pid" 2>/dev/null; do
    h=$(metric vigil_heap_in_use_bytes 2>/dev/null) &&
      [ -n "$h" ] && awk -v t0="$t0" -v now="$(date +%s.%N)" -v h="$h" 'BEGIN {printf "%.1f %d\n", now - t0, h / 1048576}'
    sleep 1
  done ) >"$out/heap.txt" &
wait_up
echo "up after $(awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN {printf "%.1f", now - t0}') s, restored=$(metric vigil_detection_restored)"
# The server's own account of its start: the store, then incidents and detection state.
grep -o 'started in .*)' "$out/server.log" | tail -1 | sed 's/^/  server: /'
run_load "$after_seconds"
echo "after ${after_seconds} s of load: rss_mib=$(rss_mib)"
echo "acks after the restart (each load process): $(sed -n 's/.*\(ack_p50_ms=[0-9.]* ack_p99_ms=[0-9.]*\).*/\1/p' "$out"/load.*.txt | tr '\n' ' ')"
awk '{ if ($2 > max) { max = $2; at = $1 } } END { printf "largest rss_mib=%d at %.1f s after the restart\n", max, at }' "$out/rss.txt"
awk '{ if ($2 > max) { max = $2; at = $1 } } END { printf "largest heap_in_use_mib=%d at %.1f s after the restart\n", max, at }' "$out/heap.txt"
echo "  at     rss   heap in use (MiB)"
for s in 5 7 10 15 20 30 45 60 90 120 150; do
  r=$(awk -v s="$s" '$1 >= s && $1 < s + 1 && $2 > m { m = $2 } END { if (m) print m }' "$out/rss.txt")
  h=$(awk -v s="$s" '$1 >= s - 0.5 && $1 < s + 1.5 && $2 > m { m = $2 } END { if (m) print m }' "$out/heap.txt")
  [ -z "$r" ] || printf "  %3d s: %5d %5s\n" "$s" "$r" "${h:--}"
done
