#!/usr/bin/env bash
# End to end: vigil-agent's training socket checks each rank's job claim
# with a real single-node Slurm on loopback (deploy/slurm/start-local-slurm.sh
# runs proctrack/linuxproc, so the agent learns a process's job from
# `scontrol pidinfo`, then its owner and state from squeue).
#   - a rank inside batch job "llm-a" claiming "llm-a": verified;
#   - a rank inside batch job "llm-b" claiming "llm-a": refused;
#   - a process outside Slurm claiming "llm-a": refused (the job is verified
#     on this node and it is not part of it);
#   - a process outside Slurm claiming "notebook": accepted, unverified.
# Usage: slurm_job_identity_test.sh PATH/TO/vigil-agent SOURCE_DIR
# Fails (never skips) when Slurm or python3 is missing.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VIGIL_AGENT SOURCE_DIR" >&2; exit 2; }
agent_bin=$1
root=$2
export PATH=$PATH:/usr/sbin:/sbin
fail() { echo "FAIL: $*" >&2; exit 1; }
for program in munged slurmctld slurmd sbatch squeue scontrol scancel curl python3; do
  command -v "$program" >/dev/null || fail "$program is missing (deploy/install-deps.sh)"
done

work=$(mktemp -d /tmp/vigil-agent-slurm.XXXXXX)
chmod 0755 "$work"
agent_pid=""
outside_pids=()
cleanup() {
  status=$?
  for pid in $agent_pid "${outside_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  scancel --name=llm-a --name=llm-b 2>/dev/null || scancel -u "$(id -u)" 2>/dev/null || true
  if [ $status -ne 0 ]; then
    for log in "$work"/agent.err "$work"/*.reply "$work"/slurm/log/*.log; do
      [ -f "$log" ] && { echo "---- $log" >&2; tail -n 30 "$log" >&2; }
    done
  fi
  "$root/deploy/slurm/stop-local-slurm.sh" "$work/slurm" 2>/dev/null || true
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

eval "$("$root/deploy/slurm/start-local-slurm.sh" "$work/slurm")"

# A rank: says hello (and one step), writes whatever the agent answers
# within 3 s to OUT, then stays connected until killed.
cat >"$work/rank.py" <<'PY'
import json, socket, sys, time
path, job, out = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
for _ in range(100):
    try:
        s.connect(path)
        break
    except OSError:
        time.sleep(0.1)
hello = {"v": 1, "type": "hello", "rank": 0}
if job:
    hello["job"] = job
s.sendall((json.dumps(hello) + "\n" +
           json.dumps({"type": "step", "step": 1, "loss": 2.5}) + "\n").encode())
s.settimeout(3)
data = b""
try:
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
with open(out + ".tmp", "wb") as f:
    f.write(data)
import os
os.rename(out + ".tmp", out)
time.sleep(600)
PY

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$agent_bin" --server 127.0.0.1:1 --insecure --node "$VIGIL_SLURM_NODE" --collectors training \
  --training-socket "$work/train.sock" --metrics-listen "127.0.0.1:$port" 2>"$work/agent.err" &
agent_pid=$!
for _ in $(seq 100); do [ -S "$work/train.sock" ] && break; sleep 0.1; done
[ -S "$work/train.sock" ] || fail "the agent did not create its training socket"

wait_file() {  # PATH
  for _ in $(seq 300); do [ -f "$1" ] && return 0; sleep 0.1; done
  fail "no answer in $1 after 30 s"
}
metric() {  # NAME -> value of vigil_agent_..._NAME for the training collector
  curl -sf "http://127.0.0.1:$port/metrics" | awk -v want="$1" '$0 !~ /^#/ && index($1, want) && /training/ { print $2; exit }'
}

sbatch -J llm-a -o /dev/null --wrap "exec python3 $work/rank.py $work/train.sock llm-a $work/a.reply" >/dev/null
wait_file "$work/a.reply"
[ ! -s "$work/a.reply" ] || fail "the rank of llm-a was refused: $(cat "$work/a.reply")"
echo "ok: a rank of llm-a claiming llm-a is accepted"

sbatch -J llm-b -o /dev/null --wrap "exec python3 $work/rank.py $work/train.sock llm-a $work/b.reply" >/dev/null
wait_file "$work/b.reply"
grep -q "not in 'llm-a'" "$work/b.reply" || fail "llm-b claiming llm-a: $(cat "$work/b.reply")"
echo "ok: a rank of llm-b claiming llm-a is refused: $(head -c 200 "$work/b.reply")"

python3 "$work/rank.py" "$work/train.sock" llm-a "$work/outside.reply" & outside_pids+=($!)
wait_file "$work/outside.reply"
grep -q "not part of" "$work/outside.reply" || fail "outsider claiming llm-a: $(cat "$work/outside.reply")"
echo "ok: a process outside Slurm claiming llm-a is refused"

python3 "$work/rank.py" "$work/train.sock" notebook "$work/notebook.reply" & outside_pids+=($!)
wait_file "$work/notebook.reply"
[ ! -s "$work/notebook.reply" ] || fail "notebook refused: $(cat "$work/notebook.reply")"
echo "ok: a process outside Slurm naming its own job is accepted, unverified"

verified=$(metric claims_verified_total)
unverified=$(metric claims_unverified_total)
refused=$(metric claims_refused_total)
echo "agent counters: verified=$verified unverified=$unverified refused=$refused"
[ "$verified" = 1 ] && [ "$refused" = 1 ] && [ "$unverified" = 2 ] ||
  fail "want verified=1 refused=1 unverified=2 (the outsider passed the check but its job was taken)"
echo "PASS"
