#!/bin/bash
# Packs the GPU checks for a machine that has a GPU but not Tenax's dependencies: test_cuda,
# bench_cuda and bench_tridiagonal from a CUDA build, with every library they load that is not the
# C runtime's or CUDA's, into .dev/bundle.tar.xz (ignored by git; carried to the GPU machine, where
# scripts/gpu_check.sh runs them). Usage: scripts/gpu_bundle.sh [build dir, default build/test]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/test}
cmake --build "$build" --target test_cuda bench_cuda bench_tridiagonal
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/tests" "$stage/bench" .dev
cp "$build/tests/test_cuda" "$stage/tests/"
cp "$build/bench/bench_cuda" "$build/bench/bench_tridiagonal" "$stage/bench/"
for bin in "$stage"/tests/* "$stage"/bench/*; do ldd "$bin"; done | awk '/=>/ {print $1, $3}' | sort -u |
  grep -v -E 'cuda|libc\.so|libm\.so|libdl|libpthread|librt|libgcc_s|libstdc|ld-linux' |
  while read -r name path; do cp -L "$path" "$stage/lib/$name"; done
tar -C "$stage" -cf - . | xz -T0 -6 > .dev/bundle.tar.xz
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
ls -la .dev/bundle.tar.xz
