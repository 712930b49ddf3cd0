#!/usr/bin/env bash
# Web UI load benchmark (issue 6): starts vigil-server in memory on free
# loopback ports with an operator token, fills it with bench/ui_fleet (1,000
# simulated 8-GPU nodes in mixed jobs, about one incident per node, kept
# alive with --follow), waits until the incidents are there, times the JSON
# API with curl and the incidents, nodes and jobs pages in headless
# Chromium (bench/ui_load.mjs), prints a summary and stops everything.
#
#   bench/ui_load.sh BUILD_DIR [RUNS]        (RUNS >= 5 for RESULTS.md; default 5)
#
# Environment: NODES (1000), MIN_INCIDENTS (1000, firing), KEEP=1 keeps the
# work dir (server and fleet logs, ui_load.json), ACCEPT_ENCODING replaces
# the browser's Accept-Encoding (diagnosis: "gzip, deflate" keeps the server
# from answering in brotli). See bench/RESULTS.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: bench/ui_load.sh BUILD_DIR [RUNS]}" && pwd)
runs=${2:-5}
nodes=${NODES:-1000}
min_incidents=${MIN_INCIDENTS:-1000}

ninja -C "$build" ui_fleet vigil-server >/dev/null
[[ -f "$root/web/vendor/uPlot.iife.min.js" ]] || "$root/scripts/vendor-web.sh"

work=$(mktemp -d /tmp/vigil-ui-load.XXXXXX)
server_pid='' fleet_pid=''
cleanup() {
  for pid in $fleet_pid $server_pid; do
    kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
  [[ -n "$fleet_pid" ]] && grep -h '^followed ' "$work/fleet.log" || true
  if [[ -n "${KEEP:-}" ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

token=ui-bench-operator-token
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
cat >"$work/server.json" <<EOF
{"grpc_listen": "127.0.0.1:0", "http_listen": "127.0.0.1:0",
 "auth": {"anonymous_read": false,
          "tokens": [{"name": "bench", "role": "operator", "sha256": "$sha"}]}}
EOF
"$build/server/vigil-server" --config "$work/server.json" --memory --grpc-insecure \
  --web-dir "$root/web" >"$work/server.log" 2>&1 &
server_pid=$!

# "vigil-server: ingest (...) on 127.0.0.1:P, HTTP API on http://127.0.0.1:Q/"
for _ in $(seq 100); do
  line=$(grep -m1 -o 'on [0-9.:]*, HTTP API on http://[0-9.:]*' "$work/server.log" || true)
  [[ -n "$line" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
[[ -n "$line" ]] || { echo "vigil-server did not report its ports" >&2; cat "$work/server.log"; exit 1; }
grpc=$(sed -E 's/^on ([0-9.:]*),.*/\1/' <<<"$line")
url=$(sed -E 's/.*(http:[0-9.:/]*)$/\1/' <<<"$line")
auth=(-H "Authorization: Bearer $token")
echo "server: grpc $grpc, http $url ($(nproc) cores, $(node --version), $(/usr/bin/chromium --version 2>/dev/null || echo chromium?))"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$build/bench/ui_fleet" --server="$grpc" --nodes="$nodes" --follow >"$work/fleet.log" 2>&1 &
fleet_pid=$!
for _ in $(seq 1200); do
  grep -q '^filled ' "$work/fleet.log" && break
  kill -0 "$fleet_pid" 2>/dev/null || { cat "$work/fleet.log"; exit 1; }
  sleep 0.5
done
grep '^filled .* failed=0$' "$work/fleet.log" || { echo "ui_fleet did not fill the fleet" >&2; tail "$work/fleet.log"; exit 1; }

# Incidents by state and severity; "firing=N" first.
incident_counts() {
  curl -sf "${auth[@]}" "$url/api/v1/incidents?state=all&limit=10000" | python3 -c '
import collections, json, sys
incs = json.load(sys.stdin)["incidents"]
firing = [i for i in incs if i["state"] == "firing"]
sev = collections.Counter(i["severity"] for i in firing)
kind = collections.Counter(i["kind"] for i in firing)
print("firing=%d all=%d %s | %s" % (len(firing), len(incs),
      " ".join("%s=%d" % kv for kv in sorted(sev.items())),
      " ".join("%s=%d" % kv for kv in kind.most_common())))'
}
previous=''
for _ in $(seq 120); do
  counts=$(incident_counts)
  firing=$(sed -E 's/^firing=([0-9]+).*/\1/' <<<"$counts")
  [[ "$firing" -ge "$min_incidents" && "$counts" == "$previous" ]] && break
  previous=$counts
  sleep 2
done
echo "incidents: $counts"
[[ "$firing" -ge "$min_incidents" ]] || { echo "fewer than $min_incidents firing incidents" >&2; exit 1; }

# Server-side time of the list endpoints: curl's time to first byte and
# total, median and max of RUNS (after one untimed request), for each answer
# encoding httplib can pick: none, gzip, and brotli (what Chromium gets: it
# offers "gzip, deflate, br, zstd" and httplib prefers br).
echo "API (curl, ms; median / max of $runs):          encoding  ttfb            total           bytes"
for path in '/api/v1/incidents?limit=1000' '/api/v1/incidents?state=firing&limit=2000' \
            '/api/v1/nodes' '/api/v1/jobs' '/js/incident.js'; do
  for encoding in identity gzip br; do
    curl -sf -o /dev/null -H "Accept-Encoding: $encoding" "${auth[@]}" "$url$path"
    for _ in $(seq "$runs"); do
      curl -sf -o /dev/null -w '%{time_starttransfer} %{time_total} %{size_download}\n' \
        -H "Accept-Encoding: $encoding" "${auth[@]}" "$url$path"
    done | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin]
col = lambda i: [r[i] * 1e3 for r in rows]
print("  %-42s %-8s %6.1f / %6.1f  %6.1f / %6.1f  %8d" % (sys.argv[1], sys.argv[2],
      statistics.median(col(0)), max(col(0)), statistics.median(col(1)), max(col(1)), rows[0][2]))' "$path" "$encoding"
  done
done

echo "browser:"
node "$root/bench/ui_load.mjs" --url "$url" --token "$token" --runs "$runs" --json "$work/ui_load.json" \
  ${ACCEPT_ENCODING:+--accept-encoding "$ACCEPT_ENCODING"}

echo "after: incidents $(incident_counts | cut -d'|' -f1); server $(grep -m1 VmRSS /proc/$server_pid/status | tr -s ' ');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
