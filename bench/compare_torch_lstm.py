#!/usr/bin/env python3
"""Seed 002's LSTM side by side with PyTorch: two layers of 64 units, batch 256, 64 inputs, T = 100,
float32, the value and the gradient of sum(h2²) w.r.t. every weight. Three programs, one thread each,
in alternated rounds of the same sitting:

- Tenax: bench_lstm's BM_Lstm2_ValueAndGradient/budget:0 (each layer one `scan`; the tape's default
  residual budget), run with TENAX_NUM_THREADS=1;
- PyTorch by hand: the same cell written as the seed's users write it (one matmul for the input and
  one for the hidden state per step, chunk into four gates, sigmoid/tanh), autograd for the gradient;
- torch.nn.LSTM (two layers), the library's fused cell.

    python3 bench/compare_torch_lstm.py [--bench build/test/bench/bench_lstm] [--rounds 5]

Prints milliseconds per value + gradient (median over rounds of each round's best of --reps) and
Tenax / PyTorch (< 1: Tenax is faster). PyTorch is optional (pip install torch): without it the
script says so and exits with status 2.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    print("compare_torch_lstm.py: PyTorch is not installed (pip install torch); nothing to compare",
          file=sys.stderr)
    sys.exit(2)

STEPS, BATCH, UNITS, INPUTS = 100, 256, 64, 64


def weights(n_in, seed):
    g = torch.Generator().manual_seed(seed)
    s = 1.0 / 8.0
    wx = (torch.randn(n_in, 4 * UNITS, generator=g) * s).requires_grad_()
    wh = (torch.randn(UNITS, 4 * UNITS, generator=g) * s).requires_grad_()
    b = torch.zeros(4 * UNITS, requires_grad=True)
    return [wx, wh, b]


def by_hand_layer(p, xs):
    wx, wh, b = p
    h = torch.zeros(BATCH, UNITS)
    c = torch.zeros(BATCH, UNITS)
    out = []
    for t in range(STEPS):
        z = xs[t] @ wx + h @ wh + b
        i, f, g, o = z.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    return torch.stack(out)


def by_hand(xs, p1, p2):
    def run():
        for w in p1 + p2:
            w.grad = None
        h2 = by_hand_layer(p2, by_hand_layer(p1, xs))
        (h2 * h2).sum().backward()
    return run


def library(xs):
    lstm = torch.nn.LSTM(INPUTS, UNITS, num_layers=2)

    def run():
        lstm.zero_grad(set_to_none=True)
        h2, _ = lstm(xs)
        (h2 * h2).sum().backward()
    return run


def best_ms(run, reps):
    run()  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def tenax_ms(bench, reps):
    env = dict(os.environ, TENAX_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [bench, "--benchmark_filter=BM_Lstm2_ValueAndGradient/budget:0$", "--benchmark_format=json",
           f"--benchmark_repetitions={reps}", "--benchmark_min_time=0.01"]
    out = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    times = [b["real_time"] for b in out["benchmarks"] if b.get("run_type") == "iteration"]
    return min(times)


def main():
    default_bench = os.path.join(os.path.dirname(__file__), "..", "build", "test", "bench", "bench_lstm")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=default_bench, help="path of the bench_lstm executable")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    xs = torch.randn(STEPS, BATCH, INPUTS, generator=torch.Generator().manual_seed(1))
    programs = {"by hand": by_hand(xs, weights(INPUTS, 10), weights(UNITS, 20)), "nn.LSTM": library(xs)}
    times = {"Tenax": [], "by hand": [], "nn.LSTM": []}
    for r in range(a.rounds):
        times["Tenax"].append(tenax_ms(a.bench, a.reps))
        for name, run in programs.items():
            times[name].append(best_ms(run, a.reps))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} ms" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nPyTorch {torch.__version__}, one thread; {STEPS} steps, batch {BATCH}, {UNITS} units, float32; "
          f"value + gradient, medians of {a.rounds} rounds (each the best of {a.reps}), load "
          f"{os.getloadavg()[0]:.2f}")
    for name in ("by hand", "nn.LSTM"):
        print(f"  Tenax {med['Tenax']:.1f} ms   PyTorch {name} {med[name]:.1f} ms   Tenax / PyTorch "
              f"{med['Tenax'] / med[name]:.2f}")


if __name__ == "__main__":
    main()
