#!/usr/bin/env bash
# Builds and runs the benchmarks; JSON results go to build/bench/<name>.json (figures: bench/RESULTS.md).
# Pass a benchmark name (bench_core, bench_recurrence, bench_scan, bench_s5, bench_map, bench_tridiagonal,
# bench_lstm, bench_threads, bench_kalman) to run only that one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENAX_BUILD_TESTS=OFF > /dev/null
names=("${@:-bench_core bench_recurrence bench_scan bench_s5 bench_map bench_tridiagonal bench_lstm bench_threads bench_kalman}")
for name in ${names[*]}; do
  cmake --build build/bench --target "$name" -j"$(nproc)"
  "./build/bench/bench/$name" --benchmark_out="build/bench/$name.json" --benchmark_out_format=json \
    --benchmark_repetitions="${REPS:-3}" --benchmark_report_aggregates_only=true
done
