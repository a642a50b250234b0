#!/usr/bin/env bash
# Instructions per op or step of each program of bench_user_programs: the load-independent figure
# beside its times. Each program runs under `valgrind --tool=cachegrind --cache-sim=no` twice, for
# LOW and HIGH repetitions; both runs' first repetition traces and compiles, so the difference over
# (HIGH - LOW) repetitions leaves out start-up, tracing and compiling.
# Usage: bench/count_instructions.sh [build dir] [program regex]   (default: build/test, all)
set -euo pipefail
build=${1:-build/test}
filter=${2:-.}
bin="$build/bench/bench_user_programs"
low=${LOW:-2}
high=${HIGH:-6}
[ -x "$bin" ] || { echo "count_instructions: build $bin first" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "count_instructions: valgrind is not installed" >&2; exit 1; }
units() {  # ops or steps per repetition, as the benchmark counts them
  case $1 in
    Chain_*) echo 2000 ;;
    *) echo 1000 ;;
  esac
}
instructions() {
  local out
  out=$(mktemp)
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" "$bin" --count "$1" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
  rm -f "$out"
}
printf '%-30s %16s\n' program "instr per unit"
for p in Chain_EagerForward Chain_EagerForwardReverse Chain_CompiledForward Chain_CompiledForwardReverse \
  Chain_HandWritten Kalman_EagerLoop Kalman_CompiledLoop Kalman_ScanFromCpp Kalman_JsonModel Recurrence_EagerLoop \
  Recurrence_CompiledLoop Recurrence_ScanEmitted Recurrence_ScanCarried Recurrence_LinearRecurrence \
  Recurrence_HandWritten; do
  [[ $p =~ $filter ]] || continue
  a=$(instructions "$p" "$low")
  b=$(instructions "$p" "$high")
  u=$(units "$p")
  awk -v a="$a" -v b="$b" -v n=$((high - low)) -v u="$u" -v p="$p" 'BEGIN {printf "%-30s %16.1f\n", p, (b - a) / n / u}'
done
