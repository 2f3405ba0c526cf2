#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent: does nothing
# when they are all present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build python3 ccache
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  nlohmann-json3-dev libopenblas-dev libxxhash-dev libhwy-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-dev
  python3-dev python3-venv python3-pip
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
