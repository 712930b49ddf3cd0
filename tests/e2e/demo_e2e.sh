#!/usr/bin/env bash
# The README's first command runs deploy/demo.sh; this runs the same script
# on an existing build (--build-dir: nothing installed or built) and checks
# what it promises a first-time user: the server comes up over mTLS with
# its agents, the UI is served, the NaN loss of job bert-ft (injected at
# 60 s) becomes a P0 incident, its pages reach the local stand-ins, the
# status loop reports them, and Ctrl-C (here SIGTERM) stops every process.
#
# Usage: tests/e2e/demo_e2e.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/vigil-demo-e2e.XXXXXX)
demo_pid=""

log() { echo "demo-e2e: $*"; }
fail() {
  echo "demo-e2e: FAIL: $*" >&2
  for f in "$work"/demo.log "$work"/data/*.log; do
    [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 30 "$f"; }
  done >&2
  exit 1
}
cleanup() {
  [ -z "$demo_pid" ] || kill "$demo_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
# A base port whose +11 and +12 (the demo's receivers and actuator) and a
# gRPC port are free too.
pick_ports() {
  python3 - <<'EOF'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(200):
    h = random.randrange(20000, 60000)
    g = h + 20
    if all(free(p) for p in (h, h + 11, h + 12, g)):
        print(h, g); break
EOF
}
read -r hport gport < <(pick_ports)
[ -n "${gport:-}" ] || fail "no free ports"
base="http://127.0.0.1:$hport"

VIGIL_DEMO_DIR="$work/data" "$src/deploy/demo.sh" --build-dir "$build" --nodes 2 \
  --http "$hport" --grpc "$gport" >"$work/demo.log" 2>&1 &
demo_pid=$!
log "demo pid $demo_pid, UI $base"
wait_for 60 curl -sf "$base/healthz" || fail "the server did not come up"
grep -q "Vigil demo is running" "$work/demo.log" || wait_for 20 grep -q "Vigil demo is running" "$work/demo.log" ||
  fail "the demo did not print its banner"
curl -sf "$base/" | grep -qi "<html" || fail "the UI is not served at /"

# The agents stream over mTLS with the node token: samples arrive.
samples() { curl -sf "$base/metrics" | awk '/^vigil_ingest_samples_total /{print $2}'; }
has_samples() { [ "$(samples)" != "" ] && awk -v n="$(samples)" 'BEGIN{exit !(n > 0)}'; }
wait_for 60 has_samples || fail "no samples ingested"

nan_p0() {
  curl -sf "$base/api/v1/incidents?state=all" | python3 -c '
import json, sys
found = [i for i in json.load(sys.stdin).get("incidents", [])
         if i["job"] == "bert-ft" and i["kind"] == "loss_nan" and i["severity"] == "P0"]
sys.exit(0 if found else 1)'
}
wait_for 150 nan_p0 || fail "no P0 loss_nan incident of job bert-ft"
log "P0 loss_nan of bert-ft opened"
wait_for 60 test -s "$work/data/pages.jsonl" || fail "no page reached the local receivers"
log "pages delivered: $(wc -l <"$work/data/pages.jsonl")"
wait_for 30 grep -q "pages delivered: [1-9]" "$work/demo.log" ||
  fail "the status loop does not report the pages"
grep -q "loss_nan" "$work/demo.log" || wait_for 20 grep -q "loss_nan" "$work/demo.log" ||
  fail "the status loop does not list the incident"

# (The demo is this script's child: once it exits it is a zombie until
# waited for, so look at its state, not at kill -0.)
# (/proc, not ps: procps need not be installed.)
demo_running() {
  local stat
  stat=$(cat "/proc/$demo_pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }  # the state follows the parenthesised command name
  [[ $stat != Z* ]]
}
kill -TERM "$demo_pid"
deadline=$((SECONDS + 30))
while demo_running; do
  [ $SECONDS -lt $deadline ] || fail "the demo did not stop on SIGTERM"
  sleep 1
done
wait "$demo_pid" 2>/dev/null || true
demo_pid=""
# Every process it started is gone: the server, the agents, the stand-ins
# and the actuator all name its data dir on their command lines.
wait_for 15 bash -c "! curl -sf $base/healthz" || fail "the server outlived the demo"
leftovers() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    tr '\0' ' ' <"$f" 2>/dev/null | grep -q -- "$work/data/" && echo "${f%/cmdline}"
  done
  return 0
}
no_leftovers() { [ -z "$(leftovers)" ]; }
wait_for 10 no_leftovers || fail "processes outlived the demo: $(leftovers)"
log "ok"
