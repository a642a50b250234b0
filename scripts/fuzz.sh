#!/usr/bin/env bash
# Fuzzes the JSON model loader with libFuzzer under ASan+UBSan for a bounded time (seconds, default
# 60), starting from a seed corpus of the example models and of past findings (tests/fuzz/seeds/).
# Exits non-zero on any finding; the crashing input is left in build/fuzz/findings/.
# Second argument: libFuzzer's random seed. scripts/test.sh (and so CI) passes a fixed one, so that
# a run explores the same inputs in the same order and a CI verdict does not depend on chance;
# `bash scripts/fuzz.sh 600 0` (seed 0 = libFuzzer picks one) explores new ground. Add each finding,
# once fixed, to tests/fuzz/seeds/ and as a unit test in tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
seed=${2:-1}
jobs=$(nproc)

cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DTENAX_FUZZ=ON -DTENAX_WERROR=ON \
  -DTENAX_SANITIZE=address,undefined -DTENAX_CUDA=OFF \
  -DTENAX_BUILD_TESTS=OFF -DTENAX_BUILD_BENCH=OFF -DTENAX_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/fuzz -j"$jobs" --target fuzz_model_loader

# A seeded run starts from the seeds alone (what CI runs); seed 0 grows build/fuzz/corpus-explore
# across runs.
corpus=build/fuzz/corpus
[ "$seed" = 0 ] && corpus=build/fuzz/corpus-explore
[ "$seed" = 0 ] || rm -rf "$corpus"
findings=build/fuzz/findings
mkdir -p "$corpus" "$findings"
cp tests/fuzz/seeds/*.json "$corpus"/
# The target resolves data paths against examples/: prefix each model's CSV paths with its folder.
for f in examples/*/model.json; do
  name=$(basename "$(dirname "$f")")
  sed -E "s#\"csv\": \"([^\"]+)\"#\"csv\": \"$name/\\1\"#g" "$f" > "$corpus/$name.json"
done

echo "fuzz: model loader for ${seconds}s on $(ls "$corpus" | wc -l) corpus files, seed $seed"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build/fuzz/tests/fuzz/fuzz_model_loader "$corpus" -max_total_time="$seconds" -seed="$seed" -max_len=16384 \
  -timeout=10 -rss_limit_mb=4096 -dict=tests/fuzz/model.dict -artifact_prefix="$findings/" -print_final_stats=1
