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

# Instructions per series-step of value_and_grad on each rank (load-independent): cachegrind of
# BM_KalmanWeak/256/200 at 3 and at 9 iterations, the difference over 6 x 256 x 200, at 1 and 2 ranks.
if command -v valgrind > /dev/null; then
  for np in 1 2; do
    for it in 3 9; do
      rm -f "$out"/cg.$np.$it.*
      mpirun --oversubscribe --bind-to none -np "$np" valgrind --tool=cachegrind --cache-sim=no \
        --cachegrind-out-file="$out/cg.$np.$it.%q{OMPI_COMM_WORLD_RANK}" "$build/bench/bench_scaling" \
        --benchmark_filter="BM_KalmanWeak/256/200/iterations:$it/" > /dev/null 2>&1
    done
    for r in $(seq 0 $((np - 1))); do
      a=$(grep '^summary:' "$out/cg.$np.3.$r" | awk '{print $2}')
      b=$(grep '^summary:' "$out/cg.$np.9.$r" | awk '{print $2}')
      echo "instructions per series-step, $np ranks, rank $r: $(( (b - a) / (6 * 256 * 200) ))"
    done
  done
fi
