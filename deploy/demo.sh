#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on this machine:
# vigil-server plus a simulated cluster of vigil-agents, all on loopback.
# Usage: deploy/demo.sh [--nodes N] [--job NAME] [--http PORT] [--grpc PORT]
# Ctrl-C stops everything. Data lives in $VIGIL_DEMO_DIR (default /tmp/vigil-demo).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nodes=4
job=llama-70b
http_port=8080
grpc_port=7070
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --job) job=$2; shift 2 ;;
    --http) http_port=$2; shift 2 ;;
    --grpc) grpc_port=$2; shift 2 ;;
    *) echo "demo: unknown argument $1" >&2; exit 2 ;;
  esac
done
data=${VIGIL_DEMO_DIR:-/tmp/vigil-demo}
"$root/deploy/install-deps.sh"
"$root/deploy/build.sh" "$root/build"
bin=$root/build
mkdir -p "$data"
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "demo: stopping"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

"$bin/server/vigil-server" --data-dir "$data/server" \
  --grpc-listen "127.0.0.1:$grpc_port" --http-listen "127.0.0.1:$http_port" \
  --web-dir "$root/web" >"$data/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null || {
  echo "demo: server did not come up; see $data/server.log" >&2; tail -20 "$data/server.log" >&2; exit 1; }

for i in $(seq 1 "$nodes"); do
  node=$(printf 'n%03d' "$i")
  "$bin/agent/vigil-agent" --server "127.0.0.1:$grpc_port" --node "$node" \
    --job "$job" --seed "$i" --simulate >"$data/agent-$node.log" 2>&1 &
  pids+=($!)
done

cat <<MSG

Vigil demo is running: 1 server, $nodes simulated 8-GPU nodes of job "$job".
  UI:       http://127.0.0.1:$http_port/
  metrics:  http://127.0.0.1:$http_port/metrics
  series:   http://127.0.0.1:$http_port/api/v1/series?node=n001&metric=gpu_power_watts
  query:    http://127.0.0.1:$http_port/api/v1/query?series=0&step=10
  logs:     $data/*.log
Ctrl-C to stop.
MSG
while true; do
  sleep 10
  rate=$(curl -sf "http://127.0.0.1:$http_port/metrics" | awk '/^vigil_ingest_samples_total /{print $2}')
  echo "$(date +%T) samples ingested: ${rate:-?}"
done
