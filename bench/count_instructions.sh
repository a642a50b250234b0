#!/usr/bin/env bash
# Instructions per op or step of each program of bench_user_programs, and of each state-space output
# of bench_kalman (StateSpace_<what>_<state>, one series, T = 1000): the load-independent figure
# beside their times. Each program runs under `valgrind --tool=cachegrind --cache-sim=no` twice, for
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
    *Long) echo 10000 ;;
    *) echo 1000 ;;
  esac
}
instructions() {  # program, repetitions[, more arguments before them]
  local out
  out=$(mktemp)
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" "$bin" --count "$@" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
  rm -f "$out"
}
printf '%-30s %16s\n' program "instr per unit"
for p in Chain_EagerForward Chain_EagerForwardReverse Chain_CompiledForward Chain_CompiledForwardReverse \
  Chain_HandWritten Kalman_EagerLoop Kalman_CompiledLoop Kalman_ScanFromCpp Kalman_ScanJvp Kalman_JsonModel Recurrence_EagerLoop \
  Recurrence_CompiledLoop Recurrence_ScanEmitted Recurrence_ScanEmittedLong Recurrence_ScanCarried Recurrence_LinearRecurrence \
  Recurrence_HandWritten; do
  [[ $p =~ $filter ]] || continue
  a=$(instructions "$p" "$low")
  b=$(instructions "$p" "$high")
  u=$(units "$p")
  awk -v a="$a" -v b="$b" -v n=$((high - low)) -v u="$u" -v p="$p" 'BEGIN {printf "%-30s %16.1f\n", p, (b - a) / n / u}'
done
bin="$build/bench/bench_kalman"
[ -x "$bin" ] || exit 0
for what in loglik smoothed forecast loglik_diffuse value_and_grad standard_errors; do
  for n in 2 4; do
    p="StateSpace_${what}_${n}"
    [[ $p =~ $filter ]] || continue
    a=$(instructions "$what" "$n" "$low")
    b=$(instructions "$what" "$n" "$high")
    awk -v a="$a" -v b="$b" -v n=$((high - low)) -v p="$p" 'BEGIN {printf "%-30s %16.1f\n", p, (b - a) / n / 1000}'
  done
done
