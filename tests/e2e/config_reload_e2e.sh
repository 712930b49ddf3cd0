#!/usr/bin/env bash
# The config of a running vigil-server binary, as an operator changes it:
# --check-config's answer and exit code for a good and a bad config, SIGHUP
# putting a new on-call schedule in force at once and listing a storage
# change as waiting for a restart, a broken config refused by SIGHUP with
# the server still running on the old one, and `vigilctl reload` doing the
# same as SIGHUP with an admin token.
#
# Usage: tests/e2e/config_reload_e2e.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
work=$(mktemp -d /tmp/vigil-reload-e2e.XXXXXX)
server_pid=""

log() { echo "reload-e2e: $*"; }
fail() {
  echo "reload-e2e: FAIL: $*" >&2
  [ -f "$work/server.log" ] && { echo "--- server.log (tail)"; tail -n 30 "$work/server.log"; } >&2
  exit 1
}
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

hport=$(free_port)
admin_token=reload-e2e-admin-token
admin_sha=$(printf %s "$admin_token" | sha256sum | cut -d' ' -f1)
# config ON_CALL [EXTRA]: the server's config with ON_CALL as the primary.
config() {
  cat >"$work/server.json" <<EOF
{"memory": true, "grpc_insecure": true, "grpc_listen": "127.0.0.1:0",
 "http_listen": "127.0.0.1:$hport", "http": {"threads": 4}${2:-},
 "auth": {"tokens": [{"name": "ada", "role": "admin", "sha256": "$admin_sha"}]},
 "escalation": {"users": [{"name": "alice"}, {"name": "bob"}, {"name": "carol"}],
   "schedules": [{"name": "primary", "layers": [{"start": 1700000000, "users": ["$1"]}]}]}}
EOF
}
on_call() {
  curl -sf "http://127.0.0.1:$hport/api/v1/oncall" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["schedules"][0]["user"])'
}
on_call_is() { [ "$(on_call)" == "$1" ]; }
server_log_has() { grep -qF "$1" "$work/server.log"; }

log "--check-config"
config alice
out=$("$build/server/vigil-server" --config "$work/server.json" --check-config) ||
  fail "--check-config refused a good config: $out"
[[ $out == *"config OK"* ]] || fail "--check-config said: $out"
rc=0
err=$("$build/server/vigil-server" --config "$work/server.json" --rules "$work/nope.json" \
  --check-config 2>&1) || rc=$?
[ $rc -eq 1 ] || fail "--check-config with an unreadable rules file: exit $rc, want 1"
[[ $err == *"detection.rules_file"*"nope.json"* ]] || fail "--check-config said: $err"
echo '{"storage": {"block_samples": 0}}' >"$work/bad.json"
rc=0
err=$("$build/server/vigil-server" --config "$work/bad.json" --check-config 2>&1) || rc=$?
[ $rc -eq 1 ] || fail "--check-config with a bad value: exit $rc, want 1"
[[ $err == *"storage.block_samples"* ]] || fail "--check-config said: $err"

log "start, then SIGHUP with a new schedule and a storage change"
"$build/server/vigil-server" --config "$work/server.json" >"$work/server.log" 2>&1 &
server_pid=$!
wait_for 20 on_call_is alice || fail "the server did not come up with alice on call"
config bob ', "storage": {"block_samples": 360}'
kill -HUP "$server_pid"
wait_for 10 on_call_is bob || fail "SIGHUP did not put bob on call (on call: $(on_call))"
wait_for 5 server_log_has "config reload by SIGHUP: applied: escalation.schedules; changed, in force after a restart: storage.block_samples" ||
  fail "the reload was not logged as expected"
curl -sf "http://127.0.0.1:$hport/metrics" | grep -qx 'vigil_config_restart_required_keys 1' ||
  fail "/metrics does not count the key waiting for a restart"

log "a broken config changes nothing"
echo '{"escalation": ' >"$work/server.json"
kill -HUP "$server_pid"
wait_for 5 server_log_has "config not reloaded, nothing changed" || fail "the refused reload was not logged"
kill -0 "$server_pid" 2>/dev/null || fail "a broken config stopped the server"
on_call_is bob || fail "a broken config changed who is on call"
curl -sf "http://127.0.0.1:$hport/metrics" | grep -qx 'vigil_config_last_reload_successful 0' ||
  fail "/metrics does not show the failed reload"

log "vigilctl reload"
config carol
out=$(VIGIL_TOKEN=$admin_token "$build/ctl/vigilctl" --server "http://127.0.0.1:$hport" reload) ||
  fail "vigilctl reload failed: $out"
[[ $out == *"in force now: escalation.schedules"* ]] || fail "vigilctl reload said: $out"
on_call_is carol || fail "vigilctl reload did not put carol on call"

kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[ $rc -eq 0 ] || fail "the server exited $rc on SIGTERM"
log "ok"
