#!/usr/bin/env bash
# Builds the Debian package vigil_VERSION-1_ARCH.deb: configures a release
# build (no tests, no benchmarks) in BUILD_DIR, builds it, vendors the web
# UI's uPlot (scripts/vendor-web.sh) and runs `cpack -G DEB` there. Prints
# the path of the .deb on the last line.
# Usage: deploy/package.sh [BUILD_DIR]     (default: <repo>/build-deb)
# Needs dpkg-dev (dpkg-shlibdeps computes Depends; build-essential has it).
# Install on Debian 12:  apt install ./vigil_*.deb   (pulls the libraries)
# The layout and the maintainer scripts: deploy/debian/README.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-deb}
case ${1:-} in -h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
command -v dpkg-shlibdeps >/dev/null ||
  { echo "package.sh: dpkg-shlibdeps missing: apt-get install dpkg-dev" >&2; exit 1; }
# Let ccache reuse objects across build dirs (paths hashed relative to root).
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVIGIL_BUILD_TESTS=OFF -DVIGIL_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" -j"$(nproc)"
"$root/scripts/vendor-web.sh"
(cd "$build" && cpack -G DEB)
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
deb=$(ls -t "$build"/vigil_"$version"-*.deb | head -n 1)
echo "$deb"
