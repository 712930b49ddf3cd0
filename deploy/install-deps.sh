#!/usr/bin/env bash
# Installs the Debian 12 packages Vigil needs to build and test, if missing.
# Usage: deploy/install-deps.sh [--browser]   (as root, or with sudo available)
#   --browser  also Chromium, for the web UI's browser tests (~400 MB)
# Node.js and npm (for the web UI's uPlot and the browser tests) come from
# whatever apt source the machine has; the browser tests need Node >= 20.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev libzstd-dev libeigen3-dev libcpp-httplib-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libsimdjson-dev
  libcurl4-openssl-dev libssl-dev libsnappy-dev openssl munge slurmctld slurmd slurm-client systemd
  curl python3 python3-torch python3-yaml python3-pip python3-venv python3-setuptools
  nginx-light victoria-metrics etcd-server prometheus prometheus-alertmanager
  clang libclang-rt-14-dev
)
case "${1:-}" in
  --browser) packages+=(chromium) ;;
  "") ;;
  *) echo "usage: $0 [--browser]" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# NodeSource's nodejs bundles npm (and conflicts with Debian's npm package);
# Debian's own nodejs needs npm installed beside it.
command -v node >/dev/null || missing+=(nodejs)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v npm >/dev/null; then
  echo "install-deps: installing npm"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm
fi
