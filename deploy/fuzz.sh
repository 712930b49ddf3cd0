#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan+UBSan) in
# build-fuzz, replays the committed corpora (tests/fuzz/corpus/<target>),
# then fuzzes each target for SECONDS of one core. Any crash, leak, ASan or
# UBSan report fails the run and leaves the reproducer under
# build-fuzz/crashes/<target>/. Inputs found along the way go to
# build-fuzz/corpus/<target>/ (not the committed corpus; copy what is worth
# keeping). Prints one summary line per target, also written to
# build-fuzz/fuzz-summary.txt.
#
# Usage: deploy/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS  per target; default 20 (the short form .ci/run uses).
#            The long run: deploy/fuzz.sh 1200 (20 CPU-minutes per target).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
shift || true
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2; }
build=$root/build-fuzz
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (deploy/install-deps.sh)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVIGIL_FUZZ=ON -DVIGIL_BUILD_TESTS=OFF -DVIGIL_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 ninja -C "$build" -j"$(nproc)" fuzzers
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(training_protocol_fuzz job_identity_fuzz chunk_fuzz replay_fuzz
           action_request_fuzz config_fuzz frame_log_fuzz spool_fuzz ingest_fuzz
           http_query_fuzz)
fi
summary=$build/fuzz-summary.txt
: >"$summary"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for target in "${targets[@]}"; do
  bin=$build/tests/fuzz/$target
  seeds=$root/tests/fuzz/corpus/$target
  found=$build/corpus/$target
  crashes=$build/crashes/$target
  mkdir -p "$found" "$crashes"
  log=$build/$target.log
  # Replay first: every committed input must still pass.
  if ! "$bin" -runs=0 "$seeds" >"$log" 2>&1; then
    echo "fuzz: $target fails on its committed corpus:" >&2; tail -n 40 "$log" >&2; exit 1
  fi
  if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$crashes/" "$found" "$seeds" >"$log" 2>&1; then
    echo "fuzz: $target found a failure (reproducer in $crashes):" >&2; tail -n 60 "$log" >&2; exit 1
  fi
  runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
  # The last status line ("#N  REDUCE cov: C ft: F corp: K/...").
  done_line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<<"$done_line")
  ft=$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<<"$done_line")
  corpus=$(sed -E 's/.*corp: ([0-9]+)\/.*/\1/' <<<"$done_line")
  line=$(printf '%-22s %5ss  %10s execs  %6s/s  cov %5s  ft %6s  corpus %5s  crashes 0' \
    "$target" "$seconds" "$runs" "$((runs / (seconds > 0 ? seconds : 1)))" "$cov" "$ft" "$corpus")
  echo "$line" | tee -a "$summary"
done
