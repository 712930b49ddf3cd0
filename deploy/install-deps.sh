#!/usr/bin/env bash
# Installs the Debian 12 packages Vigil needs to build and test, if missing.
# Usage: deploy/install-deps.sh   (as root, or with sudo available)
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev libzstd-dev libeigen3-dev libcpp-httplib-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libsimdjson-dev
  libcurl4-openssl-dev libssl-dev openssl munge slurmctld slurmd slurm-client systemd
  curl python3 python3-torch
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
