#!/usr/bin/env bash
# End to end: vigil-actuator with the slurm backend against a real
# single-node Slurm on loopback. A batch job plays the training job: it
# touches <checkpoint-dir>/<jobid>.checkpointed when SIGUSR1 arrives.
# Signed webhooks and job-state queries are sent with curl, signed with
# openssl; the query latency for 1 and 100 jobs is printed.
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
# query JOBS_JSON [SECRET]: POSTs {"jobs": JOBS_JSON} to /v1/jobs/query
# signed with SECRET; sets $code, $reply and $seconds (curl's total time).
query() {
  local body="{\"jobs\": $1}" key=${2:-$secret} ts signature out
  ts=$(date +%s)
  signature=$(printf '%s.%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$key" -r | cut -d' ' -f1)
  out=$(curl -sS -o "$work/reply" -w '%{http_code} %{time_total}' \
    -H "X-Vigil-Timestamp: $ts" -H "X-Vigil-Signature: v1=$signature" \
    -H 'Content-Type: application/json' --data-binary "$body" \
    "http://127.0.0.1:$port/v1/jobs/query")
  code=${out% *}
  seconds=${out#* }
  reply=$(cat "$work/reply")
}
# job_field INDEX FIELD: a field of the INDEX-th job of a query's $reply
# (lists joined with commas).
job_field() {
  python3 -c 'import json,sys
v = json.loads(sys.argv[1])["jobs"][int(sys.argv[2])][sys.argv[3]]
print(",".join(v) if isinstance(v, list) else ("" if v is None else v))' "$reply" "$1" "$2"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ""))' "$reply" "$1"; }
expect_code() { [ "$code" = "$1" ] || fail "$2: HTTP $code, expected $1: $reply"; }

echo "== job-state query: job $job_id by id and by name runs on $node"
query '["'$job_id'", "vigil-e2e", "999999", "no-such-job"]'
expect_code 200 query
[ "$(field scheduler)" = slurm ] || fail "query: $reply"
for i in 0 1; do
  [ "$(job_field $i job_id)" = "$job_id" ] || fail "query job $i: $reply"
  [ "$(job_field $i state)" = running ] || fail "query job $i: $reply"
  [ "$(job_field $i scheduler_state)" = RUNNING ] || fail "query job $i: $reply"
  [ "$(job_field $i nodes)" = "$node" ] || fail "query job $i: $reply"
  [ "$(job_field $i name)" = vigil-e2e ] || fail "query job $i: $reply"
  [ "$(job_field $i user)" = "$(id -un)" ] || fail "query job $i: $reply"
done
[ "$(job_field 1 job)" = vigil-e2e ] || fail "query: answers out of order: $reply"
for i in 2 3; do
  [ "$(job_field $i state)" = not_found ] || fail "query job $i: $reply"
done
query '["'$job_id'"]' "not-the-secret"
expect_code 401 "forged query"
query '["a b"]'
expect_code 400 "unsafe job name in a query"

echo "== job-state query latency (real Slurm, 5 runs each)"
held=""
for i in $(seq 100); do
  held="$held $(sbatch --parsable --hold --job-name "vigil-q$i" -o /dev/null --wrap 'sleep 300')"
done
ids=$(printf '"%s",' $held); ids="[${ids%,}]"
names=$(for i in $(seq 100); do printf '"vigil-q%s",' "$i"; done); names="[${names%,}]"
for what in "1 id:[\"$job_id\"]" "100 ids:$ids" "100 names:$names"; do
  label=${what%%:*}
  times=""
  for _ in 1 2 3 4 5; do
    query "${what#*:}"
    expect_code 200 "query of $label"
    times="$times $seconds"
  done
  echo "query of $label: seconds per request:$times"
done
[ "$(job_field 99 state)" = pending ] || fail "held job: $reply"
[ "$(job_field 99 scheduler_state)" = PENDING ] || fail "held job: $reply"
scancel $held

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

echo "== every action request is audited; queries are not"
lines=$(wc -l < "$work/audit.jsonl")
[ "$lines" -ge 12 ] || fail "audit log has $lines lines"
! grep -q 'jobs/query\|"jobs"' "$work/audit.jsonl" || fail "a query was audited"

echo "== a cancelled job has ended"
scancel "$job_id"
for _ in $(seq 100); do
  query '["'$job_id'", "vigil-e2e"]'
  [ "$(job_field 0 state)" = ended ] && break
  sleep 0.2
done
expect_code 200 "query after scancel"
[ "$(job_field 0 state)" = ended ] || fail "query after scancel: $reply"
[ "$(job_field 1 state)" = ended ] || fail "query by name after scancel: $reply"
case $(job_field 0 scheduler_state) in CANCELLED|COMPLETING) ;; *) fail "scheduler_state: $reply" ;; esac
[ -n "$(job_field 0 end_time)" ] || fail "no end_time: $reply"
echo "PASS"
