#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, runs every test
# (the MPI ones, label mpi, through mpirun with 1 to 4 ranks),
# then builds and runs the tests again under AddressSanitizer + UndefinedBehaviorSanitizer, runs the
# concurrency tests under ThreadSanitizer, and fuzzes model files and the C++ API for 60 s each
# (scripts/fuzz.sh).
# GPU tests (label gpu) skip with a reason where no CUDA device is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
jobs=$(nproc)
# Each stage's end, in seconds since the start: where CI's time goes (docs/decisions.md "CI time").
stage() { echo "test.sh: $1 done at ${SECONDS} s"; }
stage bootstrap

# What most users type first: CMake's default generator (Unix Makefiles), configure only, with
# nvcc where the machine has one (it failed to configure there).
cmake -S . -B build/default >/dev/null
stage "default-generator configure"

cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENAX_WERROR=ON
cmake --build build/test -j"$jobs"
stage "release build"
ctest --test-dir build/test --output-on-failure -j"$jobs"
stage "release tests"

# Without MPI: OpenMPI's libraries keep no frame pointers, so LeakSanitizer cannot tell their
# never-freed allocations from ours; the sharded code runs here over the one-process communicator
# (test_distributed), and over real ranks under valgrind in the release run (valgrind_distributed).
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DTENAX_WERROR=ON -DTENAX_SANITIZE=address,undefined -DTENAX_CUDA=OFF -DTENAX_MPI=OFF \
  -DTENAX_BUILD_BENCH=OFF -DTENAX_BUILD_EXAMPLES=ON
cmake --build build/asan -j"$jobs"
stage "ASan+UBSan build"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j"$jobs"
stage "ASan+UBSan tests"

# The concurrency tests under ThreadSanitizer. Their tasks run on std::threads there and OpenBLAS
# runs single-threaded: neither Debian's oneTBB nor its OpenBLAS is built for TSan, whose reports
# about their internal synchronisation would be false.
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DTENAX_WERROR=ON -DTENAX_SANITIZE=thread -DTENAX_CUDA=OFF \
  -DTENAX_BUILD_BENCH=OFF -DTENAX_BUILD_EXAMPLES=OFF
cmake --build build/tsan -j"$jobs" --target test_concurrency
stage "TSan build"
OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build/tsan -L concurrency --output-on-failure
stage "TSan tests"

# Model files and the C++ API under libFuzzer (ASan+UBSan, clang), bounded time, fixed seed.
bash scripts/fuzz.sh 60
stage fuzzing
