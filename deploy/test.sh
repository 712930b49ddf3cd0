#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the normal build and
# an ASan+UBSan build. Exits non-zero on the first failure.
# Usage: deploy/test.sh [--no-sanitize]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=1
[ "${1:-}" = "--no-sanitize" ] && sanitize=0
"$root/deploy/install-deps.sh"
start=$(date +%s)
echo "== build (RelWithDebInfo)"
"$root/deploy/build.sh" "$root/build"
echo "== tests"
ctest --test-dir "$root/build" --output-on-failure -j2 --timeout 600
if [ $sanitize -eq 1 ]; then
  echo "== build (ASan+UBSan)"
  # -O1: sanitizer builds compile faster; ASan and UBSan checks do not need -O2.
  "$root/deploy/build.sh" "$root/build-asan" -DVIGIL_SANITIZE=ON -DVIGIL_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g"
  echo "== tests under ASan+UBSan"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j2 --timeout 900
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
