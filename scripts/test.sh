#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, runs every test,
# then builds and runs the tests again under AddressSanitizer + UndefinedBehaviorSanitizer, then
# fuzzes the JSON model loader for 60 s (scripts/fuzz.sh).
# GPU tests (label gpu) skip with a reason where no CUDA device is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
jobs=$(nproc)

cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENAX_WERROR=ON
cmake --build build/test -j"$jobs"
ctest --test-dir build/test --output-on-failure -j"$jobs"

cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DTENAX_WERROR=ON -DTENAX_SANITIZE=address,undefined -DTENAX_CUDA=OFF \
  -DTENAX_BUILD_BENCH=OFF -DTENAX_BUILD_EXAMPLES=ON
cmake --build build/asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j"$jobs"

# The model loader under libFuzzer (ASan+UBSan, clang), bounded time, seeded by the example models.
bash scripts/fuzz.sh 60
