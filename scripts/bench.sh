#!/usr/bin/env bash
# Builds and runs the benchmarks; JSON results go to build/bench/*.json (figures: bench/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENAX_BUILD_TESTS=OFF > /dev/null
cmake --build build/bench --target bench_core -j"$(nproc)"
./build/bench/bench/bench_core --benchmark_out=build/bench/bench_core.json --benchmark_out_format=json \
  --benchmark_repetitions="${REPS:-3}" --benchmark_report_aggregates_only=true "$@"
