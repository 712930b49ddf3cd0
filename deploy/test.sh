#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test in a normal build
# (a real single-node Slurm is started by the tests that need it), then the
# hand-written memory-sensitive code (common, storage, detector, rules,
# replay, escalation, notify, the agent's collectors and training endpoint)
# again under ASan+UBSan.
# Finally the libFuzzer targets are built (clang) and run briefly
# (deploy/fuzz.sh 20: committed corpora, then 20 s per target).
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
if [ $sanitize != none ]; then
  echo "== build (ASan+UBSan, $sanitize)"
  targets=()
  [ $sanitize = some ] && targets=(common_test storage_test detector_test detector_lifecycle_test
                                    rules_test replay_test
                                    escalation_test notify_test agent_host_test
                                    agent_training_test agent_nvml_test)
  # -O1: sanitizer builds compile faster; ASan and UBSan checks do not need -O2.
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVIGIL_SANITIZE=ON -DVIGIL_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
  CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 ninja -C "$root/build-asan" -j"$(nproc)" "${targets[@]}"
  phase_done "sanitizer build"
  echo "== tests under ASan+UBSan"
  # Tests of targets not built in this mode register as *_NOT_BUILT.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j2 --timeout 900 \
      -E "_NOT_BUILT$([ $sanitize = some ] && echo '|^e2e_|^drill_|^actuator_slurm$|^agent_cli$|^agent_slurm_job_identity$')"
  phase_done "sanitizer tests"
fi
echo "== fuzzing (short form; deploy/fuzz.sh 1200 is the long run)"
"$root/deploy/fuzz.sh" 20
phase_done fuzzing
echo "== all tests passed in $(( $(date +%s) - start )) s"
