#!/usr/bin/env bash
# Installs everything Tenax needs to build, test and benchmark, from Debian's packages only.
# Idempotent: packages already present are skipped; safe to run before every build.
set -euo pipefail

packages=(
  build-essential g++ cmake git pkg-config ninja-build
  libtbb-dev libxtensor-dev libxsimd-dev xtl-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev liblapack-dev
  libeigen3-dev liblbfgspp-dev libcli11-dev
  libopenmpi-dev openmpi-bin
  clang-14 libclang-rt-14-dev valgrind gnuplot-nox
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
