#!/usr/bin/env bash
# The main job: installs what is missing, builds Tenax, and runs the flagship example end to end
# (simulate from the embedded Kalman model, fit by L-BFGS, report, save the fitted model, plot).
# Extra arguments go to the example, e.g. `bash scripts/run.sh --series 64 --steps 2000`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENAX_BUILD_TESTS=OFF -DTENAX_BUILD_BENCH=OFF > /dev/null
cmake --build build/release --target tenax_kalman_fit -j"$(nproc)"
mkdir -p out
cd out
../build/release/examples/kalman/tenax_kalman_fit "$@"
