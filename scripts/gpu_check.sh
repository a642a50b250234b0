#!/bin/bash
# The GPU checks, run from the repository root on a machine with a CUDA device, the driver, the CUDA
# toolkit's libraries and compute-sanitizer, on the bundle scripts/gpu_bundle.sh made: test_cuda
# with and without CUDA graphs, memcheck, racecheck (the fused-chains test alone, as it takes minutes
# under racecheck), then the GPU benchmarks. Logs go to $OUT (default /tmp/gpu_check).
set -u
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out" /tmp/tx
start=$(date +%s)
step() { echo "== $(($(date +%s) - start)) s: $*"; }
python3 -c "import tarfile; tarfile.open('.dev/bundle.tar.xz').extractall('/tmp/tx')"
libdir() { dirname "$(find / -xdev -name "$1" 2>/dev/null | head -1)"; }
export LD_LIBRARY_PATH=/tmp/tx/lib:/usr/local/cuda/lib64:$(libdir 'libcusparse.so.12*'):$(libdir 'libcublas.so.13*'):${LD_LIBRARY_PATH:-}
export TENAX_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldd /tmp/tx/tests/test_cuda | grep -i 'not found'
t=/tmp/tx/tests/test_cuda
san=(compute-sanitizer --error-exitcode 9 --tool)
run() {  # name, seconds, command...
  timeout "$2" "${@:3}" > "$out/$1.log" 2>&1
  echo "$1: rc=$?"; grep -E 'FAILED|PASSED|ERROR SUMMARY|RACECHECK SUMMARY|^BM' "$out/$1.log" | tail -30; step "$1"
}
run test_cuda 120 "$t" --gtest_brief=1
run test_cuda_no_graphs 120 env TENAX_CUDA_GRAPHS=0 "$t" --gtest_brief=1
run memcheck 150 "${san[@]}" memcheck "$t" --gtest_brief=1
run racecheck 200 "${san[@]}" racecheck "$t" --gtest_brief=1 --gtest_filter=-*FusedChains*
[ "${RACECHECK_FUSED:-1}" = 1 ] && run racecheck_fused 300 "${san[@]}" racecheck "$t" --gtest_filter=*FusedChains*
run bench_cuda 120 /tmp/tx/bench/bench_cuda --benchmark_min_time=0.3
run bench_tridiagonal 60 /tmp/tx/bench/bench_tridiagonal --benchmark_filter=Cuda --benchmark_min_time=0.5
