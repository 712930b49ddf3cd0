#!/usr/bin/env bash
# A real PyTorch training loop reports through the vigil Python client to a
# real vigil-agent's training socket, and its readings arrive at a real
# vigil-server: train_loss (including the step made NaN on purpose), the
# step readings StepMonitor measures, and the checkpoint phase.
#
# Usage: tests/python/torch_train_e2e.sh BUILD_DIR
# Needs Debian's python3-torch, importable from /usr/bin/python3 only.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the source tree
work=$(mktemp -d /tmp/vigil-torch-e2e.XXXXXX)
job="tiny-e2e-$$"
pids=()

log() { echo "torch-e2e: $*"; }
fail() {
  echo "torch-e2e: FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f (tail)"; tail -n 30 "$f"; done >&2
  exit 1
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
wait_for() {  # seconds, command... (status 3 from the command: give up)
  local deadline=$((SECONDS + $1)) rc; shift
  while :; do
    rc=0; "$@" >/dev/null 2>&1 || rc=$?
    [ $rc -ne 0 ] || return 0
    [ $rc -ne 3 ] && [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

"$py" -c 'import torch' 2>/dev/null || fail "$py cannot import torch (apt-get install python3-torch)"

"$build/server/vigil-server" --memory --grpc-insecure --grpc-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 >"$work/server.log" 2>&1 & server=$!; pids+=($server)
server_up() { kill -0 "$server" || return 3; grep -q 'HTTP API on' "$work/server.log"; }
wait_for 30 server_up || fail "server did not start"
grpc=$(sed -n 's/.*ingest ([^)]*) on \([0-9.]*:[0-9]*\),.*/\1/p' "$work/server.log")
http=$(sed -n 's|.*HTTP API on http://\([0-9.]*:[0-9]*\)/.*|\1|p' "$work/server.log")
[ -n "$grpc" ] && [ -n "$http" ] || fail "cannot read the server's addresses"
log "server: ingest $grpc, http $http"

sock="$work/train.sock"
"$build/agent/vigil-agent" --server "$grpc" --node n1 --insecure \
  --collectors training --training-socket "$sock" --interval 1 \
  >"$work/agent.log" 2>&1 & agent=$!; pids+=($agent)
agent_up() { kill -0 "$agent" || return 3; test -S "$sock"; }
wait_for 30 agent_up || fail "agent did not create $sock"

log "training for 40 steps as job $job"
PYTHONPATH="$src/python" "$py" "$src/tests/python/tiny_train.py" \
  --socket "$sock" --job "$job" >"$work/train.log" 2>&1 \
  || fail "tiny_train.py failed"
cat "$work/train.log"

# The agent sends a frame a second; wait until the server has what we need.
check() {
  "$py" - "$http" "$job" <<'EOF'
import json, math, sys, urllib.request
http, job = sys.argv[1:]
def get(path):
    with urllib.request.urlopen("http://%s%s" % (http, path), timeout=5) as r:
        return json.load(r)
series = get("/api/v1/series?job=%s" % job)["series"]
by_metric = {s["metric"]: s["id"] for s in series}
def values(metric):
    points = get("/api/v1/query?series=%d" % by_metric[metric])["points"]
    return [float(v) for _, v in points]  # "nan" / "inf" included
problems = []
for metric in ("train_loss", "train_grad_norm", "train_step_time_seconds",
               "train_tokens_per_second", "train_dataloader_wait_seconds",
               "train_mfu_ratio", "train_phase"):
    if metric not in by_metric:
        problems.append("no %s series for job %s" % (metric, job))
if not problems:
    loss = values("train_loss")
    if not any(math.isnan(v) for v in loss):
        problems.append("no NaN among train_loss %s" % loss)
    if not any(math.isfinite(v) for v in loss):
        problems.append("no finite train_loss %s" % loss)
    if 1.0 not in values("train_phase"):
        problems.append("no checkpoint (train_phase 1)")
    if not all(v > 0 for v in values("train_tokens_per_second")):
        problems.append("train_tokens_per_second not positive")
if problems:
    print("; ".join(problems))
    sys.exit(1)
loss = values("train_loss")
print("series: %s" % sorted(by_metric))
print("train_loss: %d points, %d NaN; train_phase: %s"
      % (len(loss), sum(map(math.isnan, loss)), values("train_phase")))
EOF
}
deadline=$((SECONDS + 30))
until check >"$work/check.log" 2>&1; do
  [ $SECONDS -lt $deadline ] || fail "server lacks the readings: $(cat "$work/check.log")"
  sleep 1
done
cat "$work/check.log"
log "ok"
