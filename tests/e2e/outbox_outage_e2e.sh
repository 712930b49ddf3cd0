#!/usr/bin/env bash
# Durable delivery end to end: pages of a real P0 are queued while every
# receiver is down, the server is killed with SIGKILL while they are still
# pending and started again, then the receivers come back — every page
# arrives exactly once (one receipt per Idempotency-Key), none is lost, and
# the deliveries API shows them all delivered.
#
# Usage: tests/e2e/outbox_outage_e2e.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/vigil-outage.XXXXXX)
pids=()
server_pid=""

log() { echo "outage-e2e: $*"; }
fail() {
  echo "outage-e2e: FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f (tail)"; tail -n 30 "$f"; done >&2
  exit 1
}
cleanup() {
  for p in "${pids[@]}" $server_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

rport=$(free_port); gport=$(free_port); hport=$(free_port)
r="http://127.0.0.1:$rport"
cat >"$work/server.json" <<EOF
{
  "data_dir": "$work/data", "grpc_listen": "127.0.0.1:$gport", "http_listen": "127.0.0.1:$hport",
  "grpc_insecure": true,
  "escalation": {
    "users": [{"name": "alice", "phone": "+15550001"}],
    "schedules": [{"name": "primary", "layers": [{"name": "w", "rotation": "weekly",
                   "start": "2026-01-05T09:00:00Z", "users": ["alice"]}]}],
    "policies": {"P0": {"steps": [{"targets": ["schedule:primary"],
                                   "channels": ["sms", "im", "pagerduty"],
                                   "wait_minutes": 0.25, "repeat": 3}]}}
  },
  "notifications": {
    "retry_base_seconds": 1, "retry_max_seconds": 4,
    "receivers": [
      {"name": "twilio-sms", "type": "twilio_sms", "settings": {
        "account_sid": "AC00000000000000000000000000000001", "auth_token": "twilio-token",
        "from": "+15550000", "base_url": "$r/twilio"}},
      {"name": "slack", "type": "slack", "settings": {"url": "$r/slack"}},
      {"name": "pagerduty", "type": "pagerduty", "settings": {
        "routing_key": "R0UTINGKEY", "url": "$r/pagerduty/v2/enqueue"}}],
    "channels": {"sms": {"receivers": ["twilio-sms"]}, "im": {"receivers": ["slack"]},
                 "pagerduty": {"receivers": ["pagerduty"]}}
  }
}
EOF
start_server() {
  "$build/server/vigil-server" --config "$work/server.json" >>"$work/server.log" 2>&1 &
  server_pid=$!
  wait_for 30 curl -sf "http://127.0.0.1:$hport/healthz" || fail "server did not start"
}
deliveries() {  # prints "pending delivered failed"
  curl -sf "http://127.0.0.1:$hport/api/v1/deliveries?limit=1000" | python3 -c '
import json, sys
d = json.load(sys.stdin)["deliveries"]
print(*[sum(x["state"] == s for x in d) for s in ("pending", "delivered", "failed")])'
}

log "receivers are down; server up; P0 fault in 10 s"
start_server
"$build/agent/vigil-agent" --server "127.0.0.1:$gport" --insecure --node n001 --job outage \
  --simulate=ecc_dbe --fault-at 10 --interval 1 >"$work/agent.log" 2>&1 & pids+=($!)
# Three rounds of pages (0, 15, 30 s) x three channels pile up undelivered.
wait_for 120 bash -c "[ \"\$(curl -sf 'http://127.0.0.1:$hport/api/v1/deliveries?limit=1000' | grep -o '\"state\":\"pending\"' | wc -l)\" -ge 6 ]" \
  || fail "pages did not queue up: $(deliveries)"
read -r pending delivered failed <<<"$(deliveries)"
log "queued while receivers are down: pending=$pending delivered=$delivered failed=$failed"
[ "$delivered" -eq 0 ] || fail "something was delivered to a receiver that is down"

log "SIGKILL the server mid-outage and start it again"
kill -9 "$server_pid"; wait "$server_pid" 2>/dev/null || true
start_server
read -r pending2 _ _ <<<"$(deliveries)"
[ "$pending2" -ge "$pending" ] || fail "the restart lost queued pages: $pending before, $pending2 after"

log "receivers come back"
python3 "$src/tests/e2e/receivers.py" --port "$rport" --log "$work/receivers.jsonl" \
  >"$work/receivers.log" 2>&1 & pids+=($!)
# Let the escalation finish its rounds (repeat 3 x 15 s), then drain.
sleep 35
wait_for 90 bash -c "[ \"\$(curl -sf 'http://127.0.0.1:$hport/api/v1/deliveries?limit=1000' | grep -o '\"state\":\"pending\"' | wc -l)\" -eq 0 ]" \
  || fail "still pending after the receivers came back: $(deliveries)"
read -r pending delivered failed <<<"$(deliveries)"
[ "$failed" -eq 0 ] || fail "$failed pages failed"
python3 - "$work/receivers.jsonl" "$delivered" <<'EOF' || fail "receipts do not match deliveries"
import collections, json, sys
receipts = [json.loads(l) for l in open(sys.argv[1])]
keys = collections.Counter(r["idempotency_key"] for r in receipts)
dups = {k: n for k, n in keys.items() if n > 1}
bad = [r for r in receipts if not r["ok"]]
print(f"outage-e2e: {len(receipts)} receipts, {len(keys)} distinct keys, "
      f"{int(sys.argv[2])} delivered, {len(dups)} duplicated, {len(bad)} malformed")
sys.exit(1 if dups or bad or "" in keys or len(keys) != int(sys.argv[2]) else 0)
EOF
log "PASS: $delivered pages queued during the outage, across a SIGKILL restart, each received exactly once"
