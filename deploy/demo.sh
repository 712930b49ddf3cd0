#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on this machine:
# vigil-server plus a simulated cluster of vigil-agents, all on loopback,
# the agents connecting over mTLS (a test CA made in $VIGIL_DEMO_DIR/tls) with
# a node token.
# Usage: deploy/demo.sh [--nodes N] [--job NAME] [--http PORT] [--grpc PORT]
#                       [--build-dir DIR]
#   --build-dir DIR  run the binaries already built in DIR; install and build
#                    nothing (tests/e2e/demo_e2e.sh runs the demo this way)
# The local page receivers listen on the HTTP port + 11, the dry-run
# actuator on + 12. Ctrl-C stops everything. Data lives in $VIGIL_DEMO_DIR
# (default /tmp/vigil-demo).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nodes=4
job=llama-70b
http_port=8080
grpc_port=7070
build_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --job) job=$2; shift 2 ;;
    --http) http_port=$2; shift 2 ;;
    --grpc) grpc_port=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "demo: unknown argument $1" >&2; exit 2 ;;
  esac
done
data=${VIGIL_DEMO_DIR:-/tmp/vigil-demo}
if [ -n "$build_dir" ]; then
  bin=$(cd "$build_dir" && pwd)
  [ -x "$bin/server/vigil-server" ] || { echo "demo: no $bin/server/vigil-server" >&2; exit 2; }
else
  "$root/deploy/install-deps.sh"
  "$root/deploy/build.sh" "$root/build"
  bin=$root/build
fi
mkdir -p "$data"
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "demo: stopping"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

# Escalation: local stand-ins for Twilio, Slack, Feishu and PagerDuty (they
# check every request's format and signature and log it) and a dry-run
# actuator, so pages and actions can be watched without real accounts.
receiver_port=$((http_port + 11))
actuator_port=$((http_port + 12))
python3 "$root/tests/e2e/receivers.py" --port "$receiver_port" --log "$data/pages.jsonl" \
  >"$data/receivers.log" 2>&1 &
pids+=($!)
[ -s "$data/actuator.secret" ] || head -c 32 /dev/urandom | base64 >"$data/actuator.secret"
"$bin/actuator/vigil-actuator" --listen "127.0.0.1:$actuator_port" \
  --secret-file "$data/actuator.secret" --backend noop --audit-log "$data/actuator-audit.jsonl" \
  >"$data/actuator.log" 2>&1 &
pids+=($!)
token=demo-operator-token
token_sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
viewer_token=demo-viewer-token
viewer_sha=$(printf %s "$viewer_token" | sha256sum | cut -d' ' -f1)

# mTLS: a CA, the server's certificate and one client certificate per node
# (kept across runs); the server binds each node name to its certificate.
# Plus a fleet-wide node token, which the server keeps only as a hash.
agent_nodes=(n101 n102 n201)
for i in $(seq 1 "$nodes"); do agent_nodes+=("$(printf 'n%03d' "$i")"); done
"$root/deploy/make-test-ca.sh" "$data/tls" "${agent_nodes[@]}" >/dev/null
[ -s "$data/tls/node.token" ] || (umask 077; head -c 24 /dev/urandom | base64 | tr -d '=+/' >"$data/tls/node.token")
node_token_sha=$(tr -d '\n' <"$data/tls/node.token" | sha256sum | cut -d' ' -f1)
r="http://127.0.0.1:$receiver_port"
cat >"$data/vigil.json" <<EOF
{"auth": {"tokens": [{"name": "demo", "role": "operator", "sha256": "$token_sha"},
                     {"name": "watcher", "role": "viewer", "sha256": "$viewer_sha"}]},
 "grpc_tls": {"cert_file": "$data/tls/server.crt", "key_file": "$data/tls/server.key",
              "client_ca_file": "$data/tls/ca.crt", "node_identity": "certificate"},
 "node_tokens": {"sha256": {"*": "$node_token_sha"}},
 "escalation": {
   "users": [{"name": "alice", "phone": "+15550001", "email": "alice@example.com", "im": "U01"},
             {"name": "bob", "phone": "+15550002", "email": "bob@example.com", "im": "U02"}],
   "schedules": [
     {"name": "primary", "layers": [{"name": "weekly", "rotation": "weekly",
       "start": "2026-01-05T09:00:00Z", "users": ["alice", "bob"]}]},
     {"name": "secondary", "layers": [{"name": "weekly", "rotation": "weekly",
       "start": "2026-01-05T09:00:00Z", "users": ["bob", "alice"]}]}]},
 "notifications": {"public_url": "http://127.0.0.1:$http_port",
   "receivers": [
     {"name": "twilio-voice", "type": "twilio_voice", "settings": {
       "account_sid": "AC00000000000000000000000000000001", "auth_token": "twilio-token",
       "from": "+15550000", "base_url": "$r/twilio",
       "callback_url": "http://127.0.0.1:$http_port/api/v1/callbacks/twilio/voice"}},
     {"name": "twilio-sms", "type": "twilio_sms", "settings": {
       "account_sid": "AC00000000000000000000000000000001", "auth_token": "twilio-token",
       "from": "+15550000", "base_url": "$r/twilio"}},
     {"name": "slack", "type": "slack", "settings": {"url": "$r/slack"}},
     {"name": "feishu", "type": "feishu", "settings": {"url": "$r/feishu", "secret": "feishu-secret"}},
     {"name": "pagerduty", "type": "pagerduty", "settings": {
       "routing_key": "R0UTINGKEY", "url": "$r/pagerduty/v2/enqueue"}}],
   "channels": {"phone": {"receivers": ["twilio-voice"]}, "sms": {"receivers": ["twilio-sms"]},
                "im": {"receivers": ["slack", "feishu"]}, "pagerduty": {"receivers": ["pagerduty"]}}},
 "actuator": {"url": "http://127.0.0.1:$actuator_port/v1/actions",
              "secret_file": "$data/actuator.secret"}}
EOF

"$bin/server/vigil-server" --data-dir "$data/server" --config "$data/vigil.json" \
  --grpc-listen "127.0.0.1:$grpc_port" --http-listen "127.0.0.1:$http_port" \
  --web-dir "$root/web" >"$data/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null || {
  echo "demo: server did not come up; see $data/server.log" >&2; tail -20 "$data/server.log" >&2; exit 1; }

# Three jobs, each with a fault injected a minute or two in, so the demo
# shows Vigil catching them: a thermal throttle (P2, localized to n003 GPU 5)
# in a 4-node job, packet loss that turns into an NCCL hang (P1 rising to P0)
# in a 2-node job, and a NaN loss (P0) in a 1-node job.
start_agent() {  # node job scenario fault-node extra...
  local node=$1 job=$2 scenario=$3 fault_node=$4
  shift 4
  "$bin/agent/vigil-agent" --server "127.0.0.1:$grpc_port" --node "$node" \
    --tls-ca "$data/tls/ca.crt" --tls-cert "$data/tls/nodes/$node.crt" \
    --tls-key "$data/tls/nodes/$node.key" --token-file "$data/tls/node.token" \
    --job "$job" --seed 7 --simulate="$scenario" --fault-node "$fault_node" "$@" \
    >"$data/agent-$node.log" 2>&1 &
  pids+=($!)
}
for i in $(seq 1 "$nodes"); do
  start_agent "$(printf 'n%03d' "$i")" "$job" thermal_throttle n003 --fault-gpu 5 --fault-at 90
done
start_agent n101 gpt-moe packet_loss_hang n102 --fault-at 150
start_agent n102 gpt-moe packet_loss_hang n102 --fault-at 150
start_agent n201 bert-ft loss_nan n201 --fault-at 60

cat <<MSG

Vigil demo is running: 1 server; job "$job" on $nodes simulated 8-GPU nodes,
job "gpt-moe" on 2 nodes, job "bert-ft" on 1 node — each with a fault coming.
  UI:         http://127.0.0.1:$http_port/  (anyone may look; sign in to act with
              token $token, or $viewer_token for a read-only session)
  incidents:  http://127.0.0.1:$http_port/api/v1/incidents
  metrics:    http://127.0.0.1:$http_port/metrics
  series:     http://127.0.0.1:$http_port/api/v1/series?node=n003&metric=gpu_sm_clock_mhz
  logs:       $data/*.log
  mTLS:       CA and certificates in $data/tls (deploy/make-test-ca.sh), node token $data/tls/node.token
  pages:      $data/pages.jsonl (what the local Twilio/Slack/Feishu/PagerDuty stand-ins received)
  actions:    $data/actuator-audit.jsonl (dry-run actuator)
  operator:   export VIGIL_SERVER=http://127.0.0.1:$http_port VIGIL_TOKEN=$token
              $bin/ctl/vigilctl incidents; $bin/ctl/vigilctl ack ID; $bin/ctl/vigilctl actions
Expect: loss NaN (P0) after ~1 min, thermal throttle on n003 GPU 5 (P2) after
~2 min, packet loss on n102 (P1) after ~3 min rising to a hang (P0) ~3 min later.
Ctrl-C to stop.
MSG
while true; do
  sleep 10
  total=$(curl -sf "http://127.0.0.1:$http_port/metrics" | awk '/^vigil_ingest_samples_total /{print $2}')
  # (no file before the first page; a failing cat would end the demo under pipefail)
  pages=0
  [ -f "$data/pages.jsonl" ] && pages=$(wc -l <"$data/pages.jsonl")
  echo "$(date +%T) samples ingested: ${total:-?}; pages delivered: $pages"
  curl -sf "http://127.0.0.1:$http_port/api/v1/incidents?state=all" | python3 -c '
import json, sys
for i in json.load(sys.stdin).get("incidents", []):
    where = (i.get("node") or "job-wide") + ("" if i.get("gpu") is None else " gpu %d" % i["gpu"])
    print("   %s %-3s %-12s %-24s %-10s %-14s %s" % (i["id"], i["severity"], i.get("lifecycle", i["state"]), i["kind"], i["job"], where, i["summary"]))
' 2>/dev/null || true
done
