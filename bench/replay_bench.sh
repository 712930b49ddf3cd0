#!/usr/bin/env bash
# Replay throughput: generates a healthy 16-node x 8-GPU hour at 1 s with
# vigil-sim (~13 M samples, ~0.7 GB) and replays it with vigil-replay on one
# core; vigil-replay prints samples/s on its summary line.
# Usage: bench/replay_bench.sh [BUILD_DIR]   (results: docs/DETECTION.md)
set -euo pipefail
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/agent/vigil-sim" --scenario healthy --nodes 16 --hours 1 \
  --output "$tmp/frames.jsonl"
cat "$tmp/frames.jsonl" > /dev/null  # into the page cache
taskset -c 0 "$build/server/vigil-replay" --input "$tmp/frames.jsonl" \
  --output "$tmp/incidents.jsonl"
