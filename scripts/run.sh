#!/usr/bin/env bash
# The main job: installs what is missing, builds Tenax, and runs the end-to-end example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENAX_BUILD_TESTS=OFF -DTENAX_BUILD_BENCH=OFF > /dev/null
cmake --build build/release --target tenax_demo -j"$(nproc)"
./build/release/examples/demo/tenax_demo
