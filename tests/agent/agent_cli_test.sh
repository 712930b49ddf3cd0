#!/usr/bin/env bash
# vigil-agent's command line: bad flags and configs are refused with a clear
# message and exit code 2 (systemd does not restart on 2); --check-config
# answers 0 or 1 without starting; --once prints
# one frame as JSON with each collector's state, and plain text is never
# implied. Usage: tests/agent/agent_cli_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
agent=$1/agent/vigil-agent
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
expect() {  # DESCRIPTION WANT_RC WANT_TEXT ARGS...
  local what=$1 rc=$2 text=$3; shift 3
  out=$("$agent" "$@" 2>&1); got=$?
  if [[ $got -ne $rc || $out != *"$text"* ]]; then
    echo "FAIL: $what: exit $got (want $rc), output: $out"; fails=$((fails + 1))
  else
    echo "ok: $what"
  fi
}
expect "unknown flag" 2 "unknown flag --bogus" --bogus
expect "flag without value" 2 "--server needs a value" --server
expect "switch with value" 2 "--once takes no value" --once=yes
expect "no server" 2 "no server set" --insecure --node n1
expect "server not host:port" 2 'is not HOST:PORT' --server vigil --insecure --node n1
expect "unknown collector" 2 'unknown collector "gpus"' --server v:1 --insecure --collectors nvml,gpus
expect "missing config" 2 "cannot read agent config /nonexistent.json" --config /nonexistent.json
echo '{"server": "v:1", "colectors": {}}' >"$work/bad.json"
expect "bad config names the key" 2 "colectors: unknown key" --config "$work/bad.json"
expect "certificate without key" 2 "cert_file and key_file go together" \
  --server 127.0.0.1:1 --node n1 --tls-cert "$work/none.crt"
# --check-config: 0 for a config that would start, 1 naming the problem
# (a start would say 2), the TLS files loaded as a connection loads them.
echo '{"server": "v:1", "node": "n1", "transport": {"insecure": true}}' >"$work/good.json"
expect "--check-config of a good config" 0 "config OK: node n1, server v:1, PLAINTEXT" \
  --config "$work/good.json" --check-config
expect "--check-config of a bad config" 1 "colectors: unknown key" --config "$work/bad.json" --check-config
echo 'not a certificate' >"$work/bad.crt"
echo 'not a key' >"$work/bad.key"
expect "--check-config reads the TLS files" 1 "$work/bad.crt" \
  --server v:1 --node n1 --tls-cert "$work/bad.crt" --tls-key "$work/bad.key" --check-config
out=$(timeout 2 "$agent" --server 127.0.0.1:1 --node n1 --collectors none 2>&1)
if [[ $out == *"transport to 127.0.0.1:1: TLS"* ]]; then
  echo "ok: no transport flags means TLS, never plain text"
else
  echo "FAIL: default transport: $out"; fails=$((fails + 1))
fi
expect "bad metrics address" 2 "not IPV4:PORT" --server 127.0.0.1:1 --insecure --node n1 \
  --collectors none --metrics-listen localhost:9465
out=$("$agent" --once --collectors cpu,disk,infiniband --proc-root "$src/tests/agent/testdata/proc" \
  --sysfs-root "$src/tests/agent/testdata/sys" --training-socket "$work/t.sock" 2>/dev/null)
if python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["job"] == "idle", d["job"]
assert d["collectors"]["infiniband"]["running"], d["collectors"]
names = {s["metric"] for s in d["samples"]}
for want in ("net_tx_bytes_total", "disk_reads_total", "host_cpu_iowait_seconds_total"):
    assert want in names, (want, sorted(names))
' "$out"; then echo "ok: --once prints a frame"; else echo "FAIL: --once: $out"; fails=$((fails + 1)); fi
[ $fails -eq 0 ] || { echo "$fails failed"; exit 1; }
