#!/usr/bin/env bash
# End to end on a real single-node Slurm: a simulated ECC double-bit fault
# on the node that runs a real sbatch job -> P0 incident -> phone, SMS, IM
# and PagerDuty requests reach local receivers in their real formats with
# valid signatures -> the job is checkpointed then suspended and the node
# drained in Slurm (checked with squeue/sinfo) -> the primary is re-paged
# while nobody answers -> an operator acknowledges through vigilctl and the
# re-paging stops; a viewer token may not acknowledge.
#
# Usage: tests/e2e/slurm_escalation_e2e.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/vigil-e2e.XXXXXX)
node=vigil-n001
pids=()

log() { echo "e2e: $*"; }
fail() {
  echo "e2e: FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f (tail)"; tail -n 30 "$f"; done >&2
  exit 1
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$src/deploy/slurm/stop-local-slurm.sh" "$work/slurm" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

count() { grep -c "\"service\": \"$1\"" "$work/receivers.jsonl" 2>/dev/null || true; }

for tool in sbatch squeue sinfo scontrol munged slurmctld slurmd python3 curl; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (deploy/install-deps.sh installs it)"
done

# --- Slurm with a real job on the node ------------------------------------
log "starting Slurm in $work/slurm"
eval "$("$src/deploy/slurm/start-local-slurm.sh" "$work/slurm" "$node")" || fail "Slurm did not start"
mkdir -p "$work/checkpoints"
# The training job: on SIGUSR1 it "saves a checkpoint" and confirms it the
# way actuator/README.md documents.
job_id=$(sbatch --parsable --job-name vigil-e2e --output "$work/job.out" \
  --wrap "trap 'echo checkpoint; touch $work/checkpoints/\$SLURM_JOB_ID.checkpointed' USR1; while true; do sleep 1; done")
wait_for 30 bash -c "squeue -h -j $job_id -o %T | grep -q RUNNING" || fail "job $job_id never ran"
log "job $job_id running on $node"

# --- receivers, actuator, server --------------------------------------------
rport=$(free_port); aport=$(free_port); gport=$(free_port); hport=$(free_port)
python3 "$src/tests/e2e/receivers.py" --port "$rport" --log "$work/receivers.jsonl" \
  >"$work/receivers.log" 2>&1 & pids+=($!)
head -c 32 /dev/urandom | base64 >"$work/actuator.secret"
"$build/actuator/vigil-actuator" --listen "127.0.0.1:$aport" --secret-file "$work/actuator.secret" \
  --backend slurm --audit-log "$work/actuator-audit.jsonl" --checkpoint-dir "$work/checkpoints" \
  >"$work/actuator.log" 2>&1 & pids+=($!)

op_token=e2e-operator-token; viewer_token=e2e-viewer-token
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat >"$work/server.json" <<EOF
{
  "data_dir": "$work/data", "grpc_listen": "127.0.0.1:$gport", "http_listen": "127.0.0.1:$hport",
  "grpc_insecure": true,
  "auth": {"tokens": [{"name": "alice", "role": "operator", "sha256": "$(sha $op_token)"},
                      {"name": "vic", "role": "viewer", "sha256": "$(sha $viewer_token)"}]},
  "escalation": {
    "users": [{"name": "alice", "phone": "+15550001", "email": "alice@example.com", "im": "U01"}],
    "schedules": [{"name": "primary", "layers": [{"name": "weekly", "rotation": "weekly",
                   "start": "2026-01-05T09:00:00Z", "users": ["alice"]}]}],
    "policies": {"P0": {"steps": [{"targets": ["schedule:primary"],
                                   "channels": ["phone", "sms", "im", "pagerduty"],
                                   "wait_minutes": 0.5, "repeat": 20}]}}
  },
  "notifications": {
    "public_url": "http://127.0.0.1:$hport",
    "receivers": [
      {"name": "twilio-voice", "type": "twilio_voice", "settings": {
        "account_sid": "AC00000000000000000000000000000001", "auth_token": "twilio-token",
        "from": "+15550000", "base_url": "http://127.0.0.1:$rport/twilio",
        "callback_url": "http://127.0.0.1:$hport/api/v1/callbacks/twilio/voice"}},
      {"name": "twilio-sms", "type": "twilio_sms", "settings": {
        "account_sid": "AC00000000000000000000000000000001", "auth_token": "twilio-token",
        "from": "+15550000", "base_url": "http://127.0.0.1:$rport/twilio"}},
      {"name": "slack", "type": "slack", "settings": {"url": "http://127.0.0.1:$rport/slack"}},
      {"name": "feishu", "type": "feishu", "settings": {"url": "http://127.0.0.1:$rport/feishu",
                                                        "secret": "feishu-secret"}},
      {"name": "dingtalk", "type": "dingtalk", "settings": {
        "url": "http://127.0.0.1:$rport/dingtalk/robot/send?access_token=t0k", "secret": "dingtalk-secret"}},
      {"name": "pagerduty", "type": "pagerduty", "settings": {
        "routing_key": "R0UTINGKEY", "url": "http://127.0.0.1:$rport/pagerduty/v2/enqueue"}}],
    "channels": {"phone": {"receivers": ["twilio-voice"]}, "sms": {"receivers": ["twilio-sms"]},
                 "im": {"receivers": ["slack", "feishu", "dingtalk"]},
                 "pagerduty": {"receivers": ["pagerduty"]}}
  },
  "actuator": {"url": "http://127.0.0.1:$aport/v1/actions", "secret_file": "$work/actuator.secret",
               "checkpoint_timeout_seconds": 30}
}
EOF
"$build/server/vigil-server" --config "$work/server.json" >"$work/server.log" 2>&1 & pids+=($!)
wait_for 30 curl -sf "http://127.0.0.1:$hport/healthz" || fail "server did not start"
wait_for 10 curl -sf "http://127.0.0.1:$aport/healthz" || fail "actuator did not start"

# --- the fault -----------------------------------------------------------------
log "agent on $node streams; ECC double-bit error at +20 s"
"$build/agent/vigil-agent" --server "127.0.0.1:$gport" --insecure --node "$node" --job vigil-e2e \
  --simulate=ecc_dbe --fault-at 20 --interval 1 >"$work/agent.log" 2>&1 & pids+=($!)

incidents() { curl -sf "http://127.0.0.1:$hport/api/v1/incidents?severity=P0"; }
wait_for 120 bash -c "curl -sf 'http://127.0.0.1:$hport/api/v1/incidents?severity=P0' | grep -q '\"node\":\"$node\"'" \
  || fail "no P0 incident on $node"
incident=$(incidents | python3 -c 'import json,sys; print(json.load(sys.stdin)["incidents"][0]["id"])')
log "P0 incident $incident"

# --- pages arrive in their real formats ----------------------------------------
for service in twilio_voice twilio_sms slack feishu dingtalk pagerduty; do
  wait_for 30 bash -c "grep -q '\"service\": \"$service\"' '$work/receivers.jsonl'" \
    || fail "no $service request arrived"
done
if grep -q '"ok": false' "$work/receivers.jsonl"; then
  fail "a receiver rejected a request: $(grep '"ok": false' "$work/receivers.jsonl" | head -3)"
fi
log "phone, SMS, Slack, Feishu, DingTalk and PagerDuty requests arrived, formats and signatures valid"

# --- Slurm: checkpointed, suspended, drained ----------------------------------
wait_for 60 bash -c "squeue -h -j $job_id -o %T | grep -q SUSPENDED" \
  || fail "job $job_id is $(squeue -h -j "$job_id" -o %T), not SUSPENDED"
[ -e "$work/checkpoints/$job_id.checkpointed" ] || fail "the job was not asked to checkpoint first"
wait_for 30 bash -c "sinfo -h -n $node -o %T | grep -qi drain" \
  || fail "node $node is $(sinfo -h -n "$node" -o %T), not drained"
log "job $job_id suspended after its checkpoint; $node $(sinfo -h -n "$node" -o %T) ($(sinfo -h -n "$node" -o %E))"

# --- re-paging, then acknowledgement stops it ---------------------------------
wait_for 60 bash -c "[ \$(grep -c '\"service\": \"twilio_voice\"' '$work/receivers.jsonl') -ge 2 ]" \
  || fail "the primary was not re-paged while unacknowledged"
ctl() { "$build/ctl/vigilctl" --server "http://127.0.0.1:$hport" "$@"; }
if ctl --token "$viewer_token" ack "$incident" >"$work/viewer-ack.log" 2>&1; then
  fail "a viewer token acknowledged the incident"
fi
ctl --token "$op_token" ack "$incident" --comment "e2e: on it" || fail "operator ack failed"
calls=$(count twilio_voice)
log "acknowledged after $calls calls; waiting 45 s for any re-page"
sleep 45
[ "$(count twilio_voice)" -eq "$calls" ] || fail "re-paged after the acknowledgement"
lifecycle=$(curl -sf "http://127.0.0.1:$hport/api/v1/incidents/$incident" |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["lifecycle"], len(j["timeline"]))')
[[ $lifecycle == acknowledged* ]] || fail "incident lifecycle is $lifecycle"
ctl --token "$op_token" actions --incident "$incident" || true
log "PASS: $incident acknowledged; timeline has ${lifecycle#* } events; no page after the ack"
