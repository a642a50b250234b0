#!/usr/bin/env bash
# Fuzzes Tenax with libFuzzer under ASan+UBSan for a bounded time per target (seconds, default 60):
# fuzz_model_loader (model files: the seed corpus of example models and past findings in
# tests/fuzz/seeds/, and documents from the structure-aware generator) and fuzz_api (op calls from
# C++, sampled and then broken). Exits non-zero on any finding; the input is left in
# build/fuzz/findings/. Each target prints, at exit, what its inputs reached.
# Second argument: libFuzzer's random seed. scripts/test.sh (and so CI) passes a fixed one, so that
# a run explores the same inputs in the same order and a CI verdict does not depend on chance;
# `bash scripts/fuzz.sh 600 0` (seed 0 = libFuzzer picks one) explores new ground, and
# `bash scripts/fuzz.sh 3600 0` is the nightly-length run. Add each finding, once fixed, to
# tests/fuzz/seeds/ and as a unit test in tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
seed=${2:-1}
jobs=$(nproc)

cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DTENAX_FUZZ=ON -DTENAX_WERROR=ON \
  -DTENAX_SANITIZE=address,undefined -DTENAX_CUDA=OFF \
  -DTENAX_BUILD_TESTS=OFF -DTENAX_BUILD_BENCH=OFF -DTENAX_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/fuzz -j"$jobs" --target fuzz_model_loader fuzz_api

# A seeded run starts from the seeds alone (what CI runs); seed 0 grows build/fuzz/corpus-explore*
# across runs.
findings=build/fuzz/findings
mkdir -p "$findings"
suffix=""
[ "$seed" = 0 ] && suffix="-explore"
loader=build/fuzz/corpus$suffix
api=build/fuzz/corpus-api$suffix
[ "$seed" = 0 ] || rm -rf "$loader" "$api"
mkdir -p "$loader" "$api"
cp tests/fuzz/seeds/* "$loader"/
# The target resolves data paths against examples/: prefix each model's CSV paths with its folder.
for f in examples/*/model.json; do
  name=$(basename "$(dirname "$f")")
  sed -E "s#\"csv\": \"([^\"]+)\"#\"csv\": \"$name/\\1\"#g" "$f" > "$loader/$name.json"
done

run() {
  local target=$1 corpus=$2
  shift 2
  echo "fuzz: $target for ${seconds}s on $(ls "$corpus" | wc -l) corpus files, seed $seed"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build/fuzz/tests/fuzz/$target" "$corpus" -max_total_time="$seconds" -seed="$seed" -max_len=16384 \
    -timeout=10 -rss_limit_mb=4096 -artifact_prefix="$findings/$target-" -print_final_stats=1 "$@"
}
run fuzz_model_loader "$loader" -dict=tests/fuzz/model.dict
run fuzz_api "$api"
