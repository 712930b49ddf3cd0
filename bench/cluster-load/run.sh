#!/usr/bin/env bash
# One vigil-server, detection on, against a 10,000-GPU cluster's agents
# (1,250 8-GPU nodes at 1 Hz, ~286 K samples/s) streamed in real time from a
# few cluster_load processes on the same machine (bench/cluster_load.cc).
# Reports what the server sustained: samples/s, its CPU (cores), RSS,
# frame -> incident latency of red-line faults, batch ack latency (as the
# agents see it, and the server's own histograms: read to ack, read to
# stored; the agents' figure adds their own scheduling on these cores), and disk
# per day (its data dir after a clean shutdown, per sample, times a day of
# the cluster's samples), and every 5 minutes its RSS, series and open
# blocks. bench/RESULTS.md has the results.
# Usage: bench/cluster-load/run.sh [BUILD_DIR] [SECONDS] [NODES] [PROCESSES]
#                                  [JOB_MINUTES] [SERVER_CONFIG]
#   defaults: build 600 1250 4 0 (none)
#   JOB_MINUTES > 0: every job ends after that many minutes and its nodes go
#   on as a new job (series keyed anew), as jobs come and go in a cluster.
#   SERVER_CONFIG: a vigil-server --config file (JSON).
#   GRPC_PORT, HTTP_PORT (environment; 17270, 18280): to run two at once.
set -euo pipefail
build=${1:-build}
seconds=${2:-600}
nodes=${3:-1250}
procs=${4:-4}
job_minutes=${5:-0}
config=${6:-}
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 60 ]] || { echo "cluster-load: SECONDS must be >= 60" >&2; exit 2; }
[[ $nodes =~ ^[1-9][0-9]*$ && $procs =~ ^[1-9][0-9]*$ ]] || { echo "cluster-load: NODES and PROCESSES must be positive" >&2; exit 2; }
[[ $job_minutes =~ ^[0-9]+$ ]] || { echo "cluster-load: JOB_MINUTES must be a whole number >= 0" >&2; exit 2; }
[ -z "$config" ] || [ -r "$config" ] || { echo "cluster-load: cannot read SERVER_CONFIG $config" >&2; exit 2; }
for bin in server/vigil-server bench/cluster_load; do
  [ -x "$build/$bin" ] || { echo "cluster-load: no $build/$bin (build it first)" >&2; exit 2; }
done
out=$(mktemp -d /tmp/vigil-cluster-load.XXXXXX)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
grpc_port=${GRPC_PORT:-17270}
http_port=${HTTP_PORT:-18280}
config_arg=()
[ -z "$config" ] || config_arg=(--config="$config")
"$build/server/vigil-server" --data-dir="$out/data" --grpc-insecure "${config_arg[@]}" \
  --grpc-listen=127.0.0.1:$grpc_port --http-listen=127.0.0.1:$http_port >"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$http_port/healthz" >/dev/null || { echo "cluster-load: server did not come up" >&2; cat "$out/server.log" >&2; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$server_pid/status"; }
hz=$(getconf CLK_TCK)
cpu0=$(ticks)
t0=$(date +%s.%N)
share=$(( (nodes + procs - 1) / procs ))
pids=()
first=1
for p in $(seq 1 "$procs"); do
  n=$(( nodes - first + 1 < share ? nodes - first + 1 : share ))
  [ "$n" -gt 0 ] || break
  "$build/bench/cluster_load" --server=127.0.0.1:$grpc_port --http-port=$http_port \
    --first-node=$first --nodes=$n --seconds="$seconds" --fault-nodes=5 \
    --job-minutes="$job_minutes" >"$out/load$p.txt" 2>&1 &
  pids+=($!)
  first=$(( first + n ))
done
# RSS every 10 s while the load runs (its peak and its last value); every
# 5 minutes also the store's series and open blocks.
metric() { curl -fsS -m 2 "http://127.0.0.1:$http_port/metrics" 2>/dev/null | awk -v m="$1" '$1 == m {print $2}'; }
( while sleep 10; do echo "$(date +%s) $(rss_kb)"; done ) >"$out/rss.txt" 2>/dev/null &
sampler=$!
( start=$(date +%s); while sleep 300; do
    echo "t=$(( $(date +%s) - start ))s rss_mib=$(( $(rss_kb) / 1024 )) series=$(metric vigil_series)" \
         "open_blocks=$(metric vigil_storage_open_blocks)" \
         "open_block_mib=$(metric vigil_storage_open_block_bytes | awk '{printf "%d", $1 / 1048576}')" \
         "idle_blocks_closed=$(metric vigil_storage_idle_blocks_closed_total)"
  done ) >"$out/timeline.txt" 2>/dev/null &
timeline=$!
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
kill $sampler $timeline 2>/dev/null || true
cat "$out/timeline.txt"
# The server's own view of its batches (vigil_ingest_batch_*_seconds).
curl -fsS -m 5 "http://127.0.0.1:$http_port/metrics" >"$out/metrics_end.txt" 2>/dev/null || true
t1=$(date +%s.%N)
cpu1=$(ticks)
rss_end=$(rss_kb)
kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=
disk=$(du -sb "$out/data" | cut -f1)
python3 - "$out" "$seconds" "$nodes" "$procs" "$hz" "$cpu0" "$cpu1" "$t0" "$t1" "$rss_end" "$disk" <<'PY'
import glob, re, statistics, sys
out, seconds, nodes, procs, hz, cpu0, cpu1, t0, t1, rss_end, disk = sys.argv[1:]
seconds, nodes, hz = int(seconds), int(nodes), int(hz)
cpu = (int(cpu1) - int(cpu0)) / hz
wall = float(t1) - float(t0)
samples = 0; lat = []; acks50 = []; acks99 = []; faults = found = failed = 0
for path in sorted(glob.glob(f"{out}/load*.txt")):
    text = open(path).read()
    m = re.search(r"samples=(\d+) ack_p50_ms=([0-9.]+) ack_p99_ms=([0-9.]+) failed_streams=(\d+) "
                  r"faults=(\d+) found=(\d+) frame_to_incident_ms=(\S+)", text)
    if not m:
        print(f"cluster-load: no result from {path}:\n{text}", file=sys.stderr)
        sys.exit(1)
    samples += int(m[1]); acks50.append(float(m[2])); acks99.append(float(m[3]))
    failed += int(m[4]); faults += int(m[5]); found += int(m[6])
    if m[7] != "-":
        lat += [float(x) for x in m[7].split(",")]
rss = [int(l.split()[1]) for l in open(f"{out}/rss.txt") if len(l.split()) == 2]
peak = max(rss + [int(rss_end)]) / 1024
lat.sort()
def q(p): return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
per_day = samples / wall * 86400
print(f"nodes={nodes} gpus={nodes * 8} processes={procs} seconds={seconds}")
print(f"samples={samples} samples_per_s={samples / wall:.0f} server_cpu_cores={cpu / wall:.2f} "
      f"samples_per_server_cpu_s={samples / cpu:.0f}")
print(f"server_rss_peak_mib={peak:.0f} server_rss_end_mib={int(rss_end) / 1024:.0f}")
print(f"ack_p50_ms(max over processes)={max(acks50):.2f} ack_p99_ms(max over processes)={max(acks99):.1f} "
      f"failed_streams={failed}")
# From the server's histograms: the bound of the bucket holding each
# quantile (so "<= X ms"), and the share of batches past 50 ms.
def histogram(name):
    buckets = []
    try:
        for line in open(f"{out}/metrics_end.txt"):
            m = re.match(name + r'_bucket\{le="([^"]+)"\} (\d+)', line)
            if m: buckets.append((float(m[1]), int(m[2])))
    except OSError:
        pass
    return buckets
def bound(buckets, p):
    total = buckets[-1][1]
    return next(le for le, n in buckets if n >= p * total)
def ms(v): return "inf" if v == float("inf") else f"{v * 1e3:g}"
for stage in ("ack", "apply", "detect"):
    b = histogram(f"vigil_ingest_batch_{stage}_seconds")
    if not b or b[-1][1] == 0:
        continue
    within50 = next(n for le, n in b if le >= 0.05)
    print(f"server_{stage}_batches={b[-1][1]} server_{stage}_p50_ms<={ms(bound(b, 0.5))} "
          f"server_{stage}_p99_ms<={ms(bound(b, 0.99))} "
          f"server_{stage}_past_50ms={100 * (1 - within50 / b[-1][1]):.3f}%")
print(f"faults={faults} found={found} frame_to_incident_p50_ms={q(0.5):.0f} "
      f"frame_to_incident_p99_ms={q(0.99):.0f} max_ms={lat[-1] if lat else float('nan'):.0f}")
print(f"disk_bytes={int(disk)} bytes_per_sample={int(disk) / samples:.3f} "
      f"disk_per_day_gb={int(disk) / samples * per_day / 1e9:.1f} (at {per_day / 1e9:.1f} G samples/day)")
PY
# Why any stream failed (cluster_load prints the gRPC status).
grep -h "stream ended" "$out"/load*.txt | head -20 >&2 || true
exit $status
