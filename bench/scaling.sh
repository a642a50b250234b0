#!/usr/bin/env bash
# Strong and weak scaling of the Kalman value_and_grad and the all-reduce under it, at 1, 2 and 4
# ranks (4 oversubscribed on 2 cores), over shared memory and over TCP on loopback (bench_scaling).
# Usage: bash bench/scaling.sh [build dir] [benchmark filter]; JSON per run in <build>/scaling/.
set -euo pipefail
build=${1:-build/test}
filter=${2:-.}
out=$build/scaling
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
for btl in vader tcp; do
  for np in 1 2 4; do
    echo "== $np ranks, btl self,$btl"
    mpirun --oversubscribe --bind-to none -np "$np" --mca btl "self,$btl" "$build/bench/bench_scaling" \
      --benchmark_filter="$filter" --benchmark_out="$out/np${np}_$btl.json" --benchmark_out_format=json
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
