#!/usr/bin/env bash
# Partition end to end with the real agent on a fully loaded node: the fake
# NVML with 8 GPUs, the RDMA and /proc collectors, at 5 Hz, spooling to disk.
# The server is SIGKILLed under load and stays away for a while; halfway
# through, the agent itself is stopped and started again on the same spool
# (an upgrade, a node reboot); then the server comes back on the same data
# directory. Every tick either agent process took must be stored exactly
# once: for each GPU power series the server holds one point per tick the
# two processes enqueued, with no timestamp twice.
#
# Usage: tests/e2e/agent_partition_e2e.sh BUILD_DIR [OUTAGE_SECONDS=40]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR [OUTAGE_SECONDS]}" && pwd)
outage=${2:-40}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/vigil-partition.XXXXXX)
pids=()
server_pid=""
agent_pid=""

log() { echo "partition-e2e: $*"; }
fail() {
  echo "partition-e2e: FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f (tail)"; tail -n 30 "$f"; done >&2
  exit 1
}
cleanup() {
  for p in "${pids[@]}" $server_pid $agent_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
metric() {  # NAME -> value from the agent's /metrics
  curl -sf "http://127.0.0.1:$mport/metrics" | awk -v n="$1" '$1 == n {print $2}'
}

fake_nvml=$build/tests/agent/fake_nvml/libnvidia-ml.so.1
[ -f "$fake_nvml" ] || fail "fake NVML not built: $fake_nvml"
gport=$(free_port); hport=$(free_port); mport=$(free_port)
start_server() {
  "$build/server/vigil-server" --data-dir "$work/data" --grpc-insecure \
    --grpc-listen "127.0.0.1:$gport" --http-listen "127.0.0.1:$hport" \
    --no-detect >>"$work/server.log" 2>&1 &
  server_pid=$!
  wait_for 30 curl -sf "http://127.0.0.1:$hport/healthz" || fail "server did not start"
}

start_agent() {  # LOG
  FAKE_NVML_GPUS=8 "$build/agent/vigil-agent" --server "127.0.0.1:$gport" --insecure \
    --node n001 --interval 0.2 --nvml-library "$fake_nvml" \
    --sysfs-root "$src/tests/agent/testdata/sys" --collectors nvml,infiniband,cpu \
    --spool-dir "$work/spool" --spool-max-mb 64 \
    --metrics-listen "127.0.0.1:$mport" >"$1" 2>&1 &
  agent_pid=$!
  wait_for 30 curl -sf "http://127.0.0.1:$mport/metrics" || fail "agent /metrics did not come up"
}
stop_agent() {  # LOG -> sets enqueued, acked, pending from its exit line
  kill -TERM "$agent_pid"; wait "$agent_pid" 2>/dev/null || true
  agent_pid=""
  read -r enqueued acked pending <<<"$(sed -n 's/.*exiting: enqueued \([0-9]*\) sent [0-9]* acked \([0-9]*\) pending \([0-9]*\).*/\1 \2 \3/p' "$1" | tail -1)"
  [ -n "$enqueued" ] || fail "no exit line in $1"
}

start_server
start_agent "$work/agent1.log"
wait_for 30 bash -c "[ \"\$(curl -sf http://127.0.0.1:$mport/metrics | awk '\$1==\"vigil_agent_batches_acked_total\"{print \$2}')\" -ge 25 ]" \
  || fail "agent did not stream"
log "streaming; SIGKILL the server for ${outage} s"
kill -9 "$server_pid"; wait "$server_pid" 2>/dev/null || true
sleep $((outage / 2))
stop_agent "$work/agent1.log"
enqueued1=$enqueued acked1=$acked pending1=$pending
log "agent restarted mid-outage: first process enqueued $enqueued1, acked $acked1, left $pending1 in the spool"
[ "${pending1:-0}" -ge $((outage * 2)) ] || fail "expected the spool to hold the outage, got ${pending1:-none}"
start_agent "$work/agent2.log"
grep -q "resending $pending1 unacknowledged batches" "$work/agent2.log" ||
  fail "the new agent did not take over the spool"
sleep $((outage - outage / 2))
log "server back"
start_server
wait_for 120 bash -c "[ \"\$(curl -sf http://127.0.0.1:$mport/metrics | awk '\$1==\"vigil_agent_pending_batches\"{print \$2}')\" = 0 ]" \
  || fail "the spool did not drain: $(metric vigil_agent_pending_batches) pending"
sleep 2
stop_agent "$work/agent2.log"
enqueued2=$enqueued acked2=$acked pending2=$pending
log "second process: enqueued $enqueued2, acked $acked2 (its own and the first's), pending $pending2"
[ "$pending2" = 0 ] || fail "agent exited with batches pending"

# One point per tick per series, none twice: the ticks are the batches the
# two processes enqueued (one frame per tick, no event frames here).
ticks=$((enqueued1 + enqueued2))
python3 - "$hport" "$ticks" <<'PY' || fail "stored points do not match the agent's ticks"
import json, sys, urllib.request
port, ticks = sys.argv[1], int(sys.argv[2])
base = "http://127.0.0.1:%s" % port
series = json.load(urllib.request.urlopen(
    base + "/api/v1/series?metric=gpu_power_watts&node=n001"))["series"]
assert len(series) == 8, "want 8 GPU power series, got %d" % len(series)
for s in series:
    q = json.load(urllib.request.urlopen(
        base + "/api/v1/query?series=%d&from=0&to=4102444800" % s["id"]))
    ts = [p[0] for p in q["points"]]
    assert len(ts) == len(set(ts)), "series %s has a timestamp twice" % s["id"]
    assert ts == sorted(ts), "series %s out of order" % s["id"]
    assert len(ts) == ticks, "series %s: %d points stored, %d ticks taken" % (
        s["id"], len(ts), ticks)
print("partition-e2e: 8 series x %d points, each tick stored exactly once" % ticks)
PY
log "PASS"
