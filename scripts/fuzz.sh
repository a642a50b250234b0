#!/usr/bin/env bash
# Fuzzes the JSON model loader with libFuzzer under ASan+UBSan for a bounded time (seconds, default
# 60), starting from a seed corpus of the example models. Exits non-zero on any finding; the
# crashing input is left in build/fuzz/findings/. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jobs=$(nproc)

cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DTENAX_FUZZ=ON -DTENAX_WERROR=ON \
  -DTENAX_SANITIZE=address,undefined -DTENAX_CUDA=OFF \
  -DTENAX_BUILD_TESTS=OFF -DTENAX_BUILD_BENCH=OFF -DTENAX_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/fuzz -j"$jobs" --target fuzz_model_loader

corpus=build/fuzz/corpus
findings=build/fuzz/findings
mkdir -p "$corpus" "$findings"
cp tests/fuzz/seeds/*.json "$corpus"/
# The target resolves data paths against examples/: prefix each model's CSV paths with its folder.
for f in examples/*/model.json; do
  name=$(basename "$(dirname "$f")")
  sed -E "s#\"csv\": \"([^\"]+)\"#\"csv\": \"$name/\\1\"#g" "$f" > "$corpus/$name.json"
done

echo "fuzz: model loader for ${seconds}s on $(ls "$corpus" | wc -l) corpus files"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build/fuzz/tests/fuzz/fuzz_model_loader "$corpus" -max_total_time="$seconds" -max_len=16384 \
  -timeout=10 -rss_limit_mb=4096 -dict=tests/fuzz/model.dict -artifact_prefix="$findings/" -print_final_stats=1
