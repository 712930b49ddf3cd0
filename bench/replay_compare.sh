#!/usr/bin/env bash
# Replay throughput of two builds side by side (e.g. this change and its
# parent): one healthy 16-node x 8-GPU half hour at 1 s from vigil-sim, then
# RUNS alternating replays of each build's vigil-replay pinned to core 0.
# Prints every run and the median samples/s of each build, and the ratio.
# Usage: bench/replay_compare.sh NEW_REPLAY OLD_REPLAY [RUNS] [SIM]
#   NEW_REPLAY/OLD_REPLAY: vigil-replay binaries; SIM: vigil-sim (default
#   build/agent/vigil-sim). Build the parent with e.g.
#   git worktree add /tmp/parent HEAD~1 && deploy/build.sh /tmp/parent/build
set -euo pipefail
new=$1 old=$2 runs=${3:-5} sim=${4:-build/agent/vigil-sim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$sim" --scenario healthy --nodes 16 --hours 0.5 --output "$tmp/frames.jsonl" >/dev/null
cat "$tmp/frames.jsonl" > /dev/null  # into the page cache
rate() {  # vigil-replay's summary line: "...; 12.3 s, 2.11 M samples/s"
  taskset -c 0 "$1" --input "$tmp/frames.jsonl" --output "$tmp/out.jsonl" 2>&1 |
    sed -n 's/.* \([0-9.]*\) M samples\/s.*/\1/p' | tail -1
}
a=() b=()
for i in $(seq "$runs"); do
  a+=("$(rate "$new")")
  b+=("$(rate "$old")")
  echo "run $i: new ${a[-1]} M/s, old ${b[-1]} M/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ma=$(median "${a[@]}") mb=$(median "${b[@]}")
echo "median: new $ma M samples/s, old $mb M samples/s, ratio $(awk -v a="$ma" -v b="$mb" 'BEGIN{printf "%.3f", a/b}')"
