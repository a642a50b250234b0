#!/usr/bin/env python3
"""Copies that move an axis in Tenax against NumPy and a plain copy (memcpy), in alternated rounds of
the same sitting: contiguous(transpose(x)) of a 3200 x 3200 float64 matrix (78 MiB each way)
against ascontiguousarray(a.T), and concat of two 3200 x 1600 matrices along the inner axis
against np.concatenate(axis=1).

    python3 bench/compare_numpy_transpose.py [--bench build/test/bench/bench_core] [--rounds 5]

One thread each (Tenax's BM_TransposeCopy/3200/1, BM_ConcatInner/3200/1 and BM_Memcpy under
`taskset -c 1` when taskset exists; NumPy's copies are single-threaded). Prints GB/s (bytes read + written per second, best of
each round's repetitions) and the ratios. NumPy is optional: without it the script exits with 2.
"""
import argparse
import json
import shutil
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:
    print("compare_numpy_transpose.py: NumPy is not installed (pip install numpy); nothing to compare",
          file=sys.stderr)
    sys.exit(2)

N = 3200


def best_gbs(copy, nbytes, reps=10):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        b = copy()
        best = min(best, time.perf_counter() - t0)
        del b
    return 2 * nbytes / best / 1e9


def numpy_gbs():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((N, N))
    left, right = rng.standard_normal((N, N // 2)), rng.standard_normal((N, N // 2))
    return (best_gbs(lambda: np.ascontiguousarray(a.T), a.nbytes),
            best_gbs(lambda: np.concatenate([left, right], axis=1), a.nbytes))


def tenax_gbs(bench):
    cmd = [bench, "--benchmark_filter=BM_Memcpy|BM_TransposeCopy/3200/1$|BM_ConcatInner/3200/1$",
           "--benchmark_format=json",
           "--benchmark_min_time=0.5"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "1"] + cmd
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    rates = {b["name"]: b["bytes_per_second"] / 1e9 for b in out["benchmarks"]}
    return rates["BM_TransposeCopy/3200/1"], rates["BM_ConcatInner/3200/1"], rates["BM_Memcpy/8388608"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", default="build/test/bench/bench_core")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"{'round':>5} {'copy':>9} {'Tenax GB/s':>11} {'memcpy GB/s':>12} {'NumPy GB/s':>11} {'Tenax/memcpy':>13} "
          f"{'Tenax/NumPy':>12}")
    for r in range(args.rounds):
        transpose, concat, memcpy = tenax_gbs(args.bench)
        npy_transpose, npy_concat = numpy_gbs()
        for name, tenax, npy in (("transpose", transpose, npy_transpose), ("concat", concat, npy_concat)):
            print(f"{r:>5} {name:>9} {tenax:>11.2f} {memcpy:>12.2f} {npy:>11.2f} {tenax / memcpy:>13.2f} "
                  f"{tenax / npy:>12.2f}")


if __name__ == "__main__":
    main()
