#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test in a normal build
# (a real single-node Slurm is started by the tests that need it), then the
# hand-written memory-sensitive code (common, storage, detector, rules,
# replay, escalation, notify, the agent's collectors and training endpoint)
# again under ASan+UBSan.
# That second build uses clang and also holds the libFuzzer targets, which
# then run briefly (deploy/fuzz.sh 10: committed corpora, then 10 s each).
# Usage: deploy/test.sh [--no-sanitize | --full-sanitize]
#   --full-sanitize  also builds the gRPC/HTTP server, agent and end-to-end
#                    tests under ASan+UBSan (about twice the CI time)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=some
case "${1:-}" in
  --no-sanitize) sanitize=none ;;
  --full-sanitize) sanitize=all ;;
  "") ;;
  *) echo "usage: $0 [--no-sanitize | --full-sanitize]" >&2; exit 2 ;;
esac
"$root/deploy/install-deps.sh" --browser
start=$(date +%s)
phase_start=$start
# Prints how long the phase that just ended took.
phase_done() {
  local now
  now=$(date +%s)
  echo "== $1 took $((now - phase_start)) s"
  phase_start=$now
}
echo "== build (RelWithDebInfo)"
"$root/deploy/build.sh" "$root/build"
phase_done build
echo "== tests"
ctest --test-dir "$root/build" --output-on-failure -j2 --timeout 600
phase_done tests
# One clang build serves both the sanitizer tests and the fuzzers: every
# library compiled once with ASan+UBSan and libFuzzer's coverage hooks
# (which cost the unit tests nothing but a little speed).
asan=$root/build-asan
if [ $sanitize != none ]; then
  echo "== build (clang, ASan+UBSan, $sanitize; the fuzzers too)"
  targets=()
  [ $sanitize = some ] && targets=(common_test storage_test detector_test detector_lifecycle_test
                                    rules_test replay_test
                                    escalation_test notify_test agent_host_test
                                    agent_training_test agent_nvml_test)
  # -O1: sanitizer builds compile faster; ASan and UBSan checks do not need -O2.
  CC=clang CXX=clang++ cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVIGIL_SANITIZE=ON -DVIGIL_FUZZ=ON -DVIGIL_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
  if [ $sanitize = some ]; then
    CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 ninja -C "$asan" -j"$(nproc)" "${targets[@]}" fuzzers
  else
    CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 ninja -C "$asan" -j"$(nproc)"
  fi
  phase_done "sanitizer build"
  echo "== tests under ASan+UBSan"
  # Tests of targets not built in this mode register as *_NOT_BUILT; the
  # tests that run the binaries themselves (end to end, drills, --help and
  # the documents generated from the binaries) are left to the normal build.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" --output-on-failure -j2 --timeout 900 \
      -E "_NOT_BUILT$([ $sanitize = some ] && echo '|^e2e_|^drill_|^actuator_slurm$|^agent_cli$|^agent_slurm_job_identity$|^reverse_proxy$|^remote_write_victoria_metrics$|^cli_vigil|^cli_doc$|^metrics_doc$|^config_doc$')"
  phase_done "sanitizer tests"
  echo "== fuzzing (short form; deploy/fuzz.sh 1200 is the long run)"
  VIGIL_FUZZ_BUILD=$asan "$root/deploy/fuzz.sh" 10
else
  echo "== fuzzing (short form; deploy/fuzz.sh 1200 is the long run)"
  "$root/deploy/fuzz.sh" 10
fi
phase_done fuzzing
echo "== all tests passed in $(( $(date +%s) - start )) s"
