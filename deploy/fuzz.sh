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
#   SECONDS  per target; default 10 (the short form .ci/run uses).
#            The long run: deploy/fuzz.sh 1200 (20 CPU-minutes per target).
#   VIGIL_FUZZ_BUILD=DIR  builds in DIR instead of build-fuzz (deploy/test.sh
#            shares its clang sanitizer build this way).
#   VIGIL_FUZZ_JOBS=N     fuzzes N targets at a time (default 1).
#   TMPDIR   where the file-recovery targets write (default /dev/shm).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-10}
shift || true
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2; }
build=${VIGIL_FUZZ_BUILD:-$root/build-fuzz}
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (deploy/install-deps.sh)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVIGIL_FUZZ=ON -DVIGIL_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 ninja -C "$build" -j"$(nproc)" fuzzers
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(training_protocol_fuzz job_identity_fuzz chunk_fuzz open_block_fuzz replay_fuzz
           action_request_fuzz config_fuzz frame_log_fuzz learn_samples_fuzz spool_fuzz promcompat_fuzz
           ingest_fuzz http_query_fuzz remote_write_fuzz alert_intake_fuzz)
fi
jobs=${VIGIL_FUZZ_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: VIGIL_FUZZ_JOBS must be a positive number" >&2; exit 2; }
summary=$build/fuzz-summary.txt
: >"$summary"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The frame-log and spool targets write each input to files and reopen
# them: on a tmpfs that is CPU, not waits on the disk (on the data disk
# 1,200 s of wall time gave them 483 and 867 CPU s).
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
# Replays, then fuzzes one target; writes its summary line to
# $build/$1.summary. Returns non-zero (after printing why) on any failure.
fuzz_one() {
  local target=$1
  local bin=$build/tests/fuzz/$target
  local seeds=$root/tests/fuzz/corpus/$target
  local found=$build/corpus/$target
  local crashes=$build/crashes/$target
  local log=$build/$target.log
  local cpu_file=$build/$target.cpu
  mkdir -p "$found" "$crashes"
  rm -f "$build/$target.summary"
  # Replay first: every committed input must still pass.
  if ! "$bin" -runs=0 "$seeds" >"$log" 2>&1; then
    echo "fuzz: $target fails on its committed corpus:" >&2; tail -n 40 "$log" >&2; return 1
  fi
  local TIMEFORMAT='%U %S'
  if ! { time "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$crashes/" "$found" "$seeds" >"$log" 2>&1; } 2>"$cpu_file"; then
    echo "fuzz: $target found a failure (reproducer in $crashes):" >&2; tail -n 60 "$log" >&2; return 1
  fi
  local runs cpu done_line cov ft corpus
  runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
  # CPU seconds (user + system) the run used: the long run's figure.
  cpu=$(awk '{ printf "%d", $1 + $2 }' "$cpu_file")
  # The last status line ("#N  REDUCE cov: C ft: F corp: K/...").
  done_line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<<"$done_line")
  ft=$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<<"$done_line")
  corpus=$(sed -E 's/.*corp: ([0-9]+)\/.*/\1/' <<<"$done_line")
  printf '%-22s %5ss wall %5ss cpu  %10s execs  %6s/s  cov %5s  ft %6s  corpus %5s  crashes 0\n' \
    "$target" "$seconds" "$cpu" "$runs" "$((runs / (cpu > 0 ? cpu : 1)))" "$cov" "$ft" "$corpus" \
    >"$build/$target.summary"
  cat "$build/$target.summary"
}
# Runs the targets, at most $jobs at a time; the first failure stops the rest.
failed=0
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  [ $failed = 0 ] || break
  fuzz_one "$target" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ $failed = 0 ] || exit 1
for target in "${targets[@]}"; do cat "$build/$target.summary" >>"$summary"; done
