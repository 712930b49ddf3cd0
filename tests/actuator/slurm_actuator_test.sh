#!/usr/bin/env bash
# End to end: vigil-actuator with the slurm backend against a real
# single-node Slurm on loopback. A batch job plays the training job: it
# touches <checkpoint-dir>/<jobid>.checkpointed when SIGUSR1 arrives.
# Signed webhooks are sent with curl, signed with openssl.
# Usage: slurm_actuator_test.sh PATH/TO/vigil-actuator SOURCE_DIR
# Fails (never skips) when Slurm, munge, curl or openssl is missing.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VIGIL_ACTUATOR SOURCE_DIR" >&2; exit 2; }
actuator_bin=$1
root=$2
export PATH=$PATH:/usr/sbin:/sbin

fail() { echo "FAIL: $*" >&2; exit 1; }
for program in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel curl openssl python3; do
  command -v "$program" >/dev/null ||
    fail "$program is missing (apt-get install munge slurmctld slurmd slurm-client curl openssl python3)"
done

work=$(mktemp -d /tmp/vigil-actuator-slurm.XXXXXX)
actuator_pid=""
cleanup() {
  status=$?
  if [ -n "$actuator_pid" ]; then kill "$actuator_pid" 2>/dev/null; wait "$actuator_pid" 2>/dev/null; fi
  if [ $status -ne 0 ]; then
    for log in "$work"/actuator.err "$work"/slurm/log/*.log; do
      [ -f "$log" ] && { echo "---- $log" >&2; tail -n 40 "$log" >&2; }
    done
  fi
  "$root/deploy/slurm/stop-local-slurm.sh" "$work/slurm" 2>/dev/null
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

eval "$("$root/deploy/slurm/start-local-slurm.sh" "$work/slurm")"
node=$VIGIL_SLURM_NODE
mkdir "$work/ckpt"

job_id=$(sbatch --parsable --job-name vigil-e2e -o "$work/job-%j.out" \
  --wrap "trap 'touch $work/ckpt/\$SLURM_JOB_ID.checkpointed' USR1; while :; do sleep 1 & wait \$!; done")
for _ in $(seq 100); do
  [ "$(squeue -h -j "$job_id" -o %T)" = RUNNING ] && break
  sleep 0.2
done
[ "$(squeue -h -j "$job_id" -o %T)" = RUNNING ] || fail "job $job_id is not running"

openssl rand -hex 32 > "$work/secret"
secret=$(cat "$work/secret")
"$actuator_bin" --listen 127.0.0.1:0 --secret-file "$work/secret" --backend slurm \
  --audit-log "$work/audit.jsonl" --checkpoint-dir "$work/ckpt" \
  --checkpoint-timeout-seconds 20 --checkpoint-poll-seconds 0.2 \
  >"$work/actuator.out" 2>"$work/actuator.err" &
actuator_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$work/actuator.out")
  [ -n "$port" ] && break
  kill -0 "$actuator_pid" 2>/dev/null || fail "vigil-actuator exited"
  sleep 0.1
done
[ -n "$port" ] || fail "vigil-actuator did not start"

# send BODY [SECRET]: POSTs BODY signed with SECRET; sets $code, $reply
# (the answer body) and $replayed (the Idempotent-Replayed header).
send() {
  local body=$1 key=${2:-$secret} ts signature
  ts=$(date +%s)
  signature=$(printf '%s.%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$key" -r | cut -d' ' -f1)
  code=$(curl -sS -o "$work/reply" -D "$work/headers" -w '%{http_code}' \
    -H "X-Vigil-Timestamp: $ts" -H "X-Vigil-Signature: v1=$signature" \
    -H "Idempotency-Key: e2e-$RANDOM" -H 'Content-Type: application/json' \
    --data-binary "$body" "http://127.0.0.1:$port/v1/actions")
  reply=$(cat "$work/reply")
  replayed=$(tr -d '\r' < "$work/headers" | sed -n 's/^Idempotent-Replayed: //Ip')
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ""))' "$reply" "$1"; }
expect_code() { [ "$code" = "$1" ] || fail "$2: HTTP $code, expected $1: $reply"; }

echo "== cordon_node $node"
cordon='{"id":"act-e2e-1","action":"cordon_node","incident_id":"inc-e2e","severity":"P1","job":"","node":"'$node'","reason":"XID 79 on GPU 3","requested_by":"e2e"}'
send "$cordon"
expect_code 200 cordon
[ "$(field status)" = done ] || fail "cordon: $reply"
state=$(sinfo -h -n "$node" -o %T)
case $state in drained|draining) ;; *) fail "node state after cordon: $state" ;; esac
[ "$(sinfo -h -n "$node" -o %E)" = "vigil inc-e2e: XID 79 on GPU 3" ] ||
  fail "drain reason: $(sinfo -h -n "$node" -o %E)"

echo "== a bad signature is refused"
send '{"id":"act-e2e-9","action":"uncordon_node","node":"'$node'"}' "not-the-secret"
expect_code 401 "bad signature"
case $(sinfo -h -n "$node" -o %T) in drained|draining) ;; *) fail "a forged uncordon acted" ;; esac

echo "== a bad node name is refused"
send '{"id":"act-e2e-8","action":"cordon_node","node":"n1; rm -rf /"}'
expect_code 400 "bad node name"

echo "== checkpoint_then_pause_job vigil-e2e (job $job_id)"
checkpoint='{"id":"act-e2e-2","action":"checkpoint_then_pause_job","incident_id":"inc-e2e","severity":"P1","job":"vigil-e2e","node":"'$node'","reason":"ECC errors","requested_by":"e2e"}'
send "$checkpoint"
expect_code 200 checkpoint
[ "$(field checkpoint)" = confirmed ] || fail "checkpoint not confirmed: $reply"
[ -f "$work/ckpt/$job_id.checkpointed" ] || fail "the job did not write its checkpoint confirmation"
[ "$(squeue -h -j "$job_id" -o %T)" = SUSPENDED ] || fail "job state: $(squeue -h -j "$job_id" -o %T)"
first_reply=$reply

echo "== a repeated id is answered from memory, not acted on twice"
send "$checkpoint"
expect_code 200 "repeat"
[ "$replayed" = true ] || fail "repeat not marked Idempotent-Replayed"
[ "$reply" = "$first_reply" ] || fail "repeat answered differently: $reply"
started=$(grep -c '"id":"act-e2e-2".*"result":"started"\|"result":"started".*"id":"act-e2e-2"' "$work/audit.jsonl" || true)
[ "$started" = 1 ] || fail "act-e2e-2 was started $started times"

echo "== an unknown job is 422"
send '{"id":"act-e2e-3","action":"pause_job","job":"no-such-job"}'
expect_code 422 "unknown job"
[ "$(field status)" = failed ] || fail "unknown job: $reply"

echo "== diagnostic_report"
send '{"id":"act-e2e-4","action":"diagnostic_report","job":"'$job_id'","node":"'$node'"}'
expect_code 200 report
case $(field detail) in *JobState=SUSPENDED*) ;; *) fail "report: $reply" ;; esac

echo "== uncordon_node $node"
send '{"id":"act-e2e-5","action":"uncordon_node","incident_id":"inc-e2e","node":"'$node'"}'
expect_code 200 uncordon
case $(sinfo -h -n "$node" -o %T) in *drain*) fail "node still drained after uncordon" ;; esac

echo "== every request is audited"
lines=$(wc -l < "$work/audit.jsonl")
[ "$lines" -ge 12 ] || fail "audit log has $lines lines"
echo "PASS"
