#!/usr/bin/env bash
# Configures and builds Vigil into a build directory, and vendors the web
# UI's chart library (uPlot, from npm) into web/vendor.
# Usage: deploy/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
# Let ccache reuse objects across checkouts (paths hashed relative to root).
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C "$build" -j"$(nproc)"
"$root/scripts/vendor-web.sh"
