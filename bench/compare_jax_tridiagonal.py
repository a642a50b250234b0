#!/usr/bin/env python3
"""The JAX #2491 case of bench_tridiagonal (100 000 float64 tridiagonal systems of 100 unknowns,
diagonally dominant) with jax.lax.linalg.tridiagonal_solve, timed side by side with Tenax.

    python3 bench/compare_jax_tridiagonal.py [--bench build/bench/bench/bench_tridiagonal] [--gpu]

Two layouts: "rows inner" (each system contiguous: JAX's native layout) and "batch inner" (the
system index contiguous: JAX needs a transpose in and out, counted, as a user would pay it). Per
layout: the solve, and the value and gradient of sum(w * x) w.r.t. all four inputs; on the CPU also
one matrix shared by every system (the first system's; JAX takes the right-hand sides as columns).
Milliseconds
(best of 5, jit-compiled, compile time excluded, all CPU threads for both), and JAX / Tenax
(> 1: Tenax is faster). JAX is optional: without it the script says so and exits with status 2.
With --gpu both run on the first CUDA device instead (JAX with CUDA; Tenax's BM_Cuda_Solve and
BM_Cuda_Gradient, which need a bench_tridiagonal built with the CUDA backend): JAX calls cuSPARSE's
gtsv2StridedBatch too.
"""
import argparse
import json
import os
import subprocess
import sys
import time

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("compare_jax_tridiagonal.py: JAX is not installed (pip install 'jax[cpu]'); nothing to compare",
          file=sys.stderr)
    sys.exit(2)

jax.config.update("jax_enable_x64", True)
SYSTEMS, ROWS = 100_000, 100


def problem(batch_inner):
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    shape = (ROWS, SYSTEMS) if batch_inner else (SYSTEMS, ROWS)
    return (jax.random.uniform(k[0], shape, minval=-1, maxval=1), jax.random.uniform(k[1], shape, minval=2.5, maxval=3.5),
            jax.random.uniform(k[2], shape, minval=-1, maxval=1), jax.random.uniform(k[3], shape, minval=-1, maxval=1))


def solver(batch_inner):
    """x = A^{-1} rhs in the operands' own layout (JAX solves along the last axis)."""
    def solve(dl, d, du, b):
        if batch_inner:
            dl, d, du, b = dl.T, d.T, du.T, b.T
        # JAX's convention: dl[0] and du[-1] must be zero; Tenax ignores them.
        dl = dl.at[:, 0].set(0.0)
        du = du.at[:, -1].set(0.0)
        x = jax.lax.linalg.tridiagonal_solve(dl, d, du, b[..., None])[..., 0]
        return x.T if batch_inner else x
    return solve


def shared_solver(batch_inner):
    """One matrix (dl, d, du along the rows only) for every right-hand side: JAX's tridiagonal_solve
    takes them as the columns of b (rows, systems) — the batch-inner layout; rows inner transposes."""
    def solve(dl, d, du, b):
        dl = dl.at[0].set(0.0)
        du = du.at[-1].set(0.0)
        x = jax.lax.linalg.tridiagonal_solve(dl, d, du, b if batch_inner else b.T)
        return x if batch_inner else x.T
    return solve


def best_ms(f, *args, reps=5):
    out = f(*args)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def time_jax(batch_inner):
    ops = problem(batch_inner)
    solve = solver(batch_inner)
    w = ops[3]
    loss = lambda dl, d, du, b: jnp.sum(w * solve(dl, d, du, b))
    return (best_ms(jax.jit(solve), *ops),
            best_ms(jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3))), *ops))


def time_jax_shared(batch_inner):
    full = problem(False)
    ops = (full[0][0], full[1][0], full[2][0], problem(batch_inner)[3])
    solve = shared_solver(batch_inner)
    w = ops[3]
    loss = lambda dl, d, du, b: jnp.sum(w * solve(dl, d, du, b))
    return (best_ms(jax.jit(solve), *ops),
            best_ms(jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3))), *ops))


def bench_ms(bench, want, filt):
    """The benchmarks of `bench` matching `filt`, real time in milliseconds by want[name]."""
    out = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json", "--benchmark_min_time=1"],
                         check=True, capture_output=True, text=True).stdout
    got = {want[r["name"]]: r["real_time"] for r in json.loads(out)["benchmarks"] if r["name"] in want}
    if len(got) != len(want):
        raise SystemExit(f"compare_jax_tridiagonal.py: {bench} lacks {filt}")
    return got["solve"], got["gradient"]  # milliseconds (the benchmarks' unit)


def time_tenax_shared(bench, batch_inner, threads):
    b = int(batch_inner)
    want = {f"BM_Tenax_SolveShared/batch_inner:{b}/threads:{threads}/pivoting:0/real_time": "solve",
            f"BM_Tenax_GradientShared/batch_inner:{b}/real_time": "gradient"}
    return bench_ms(bench, want,
                    f"BM_Tenax_SolveShared/batch_inner:{b}/threads:{threads}/pivoting:0/|BM_Tenax_GradientShared/batch_inner:{b}/")


def time_tenax(bench, batch_inner, threads, gpu):
    b = int(batch_inner)
    if gpu:
        want = {f"BM_Cuda_Solve/batch_inner:{b}/real_time": "solve",
                f"BM_Cuda_Gradient/batch_inner:{b}/real_time": "gradient"}
        return bench_ms(bench, want, f"BM_Cuda_(Solve|Gradient)/batch_inner:{b}/")
    want = {f"BM_Tenax_Solve/batch_inner:{b}/threads:{threads}/real_time": "solve",
            f"BM_Tenax_Gradient/batch_inner:{b}/threads:{threads}/real_time": "gradient"}
    return bench_ms(bench, want, f"BM_Tenax_(Solve|Gradient)/batch_inner:{b}/threads:{threads}/")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bench = next((p for p in (os.path.join(here, "..", d, "bench", "bench_tridiagonal")
                                      for d in ("build/bench", "build/release")) if os.path.exists(p)), None)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=default_bench, help="path of the bench_tridiagonal executable")
    ap.add_argument("--gpu", action="store_true", help="both on the first CUDA device (JAX with CUDA needed)")
    args = ap.parse_args()
    if not args.bench or not os.path.exists(args.bench):
        raise SystemExit("compare_jax_tridiagonal.py: build bench_tridiagonal first "
                         "(bash scripts/bench.sh bench_tridiagonal) or pass --bench")
    threads = os.cpu_count() or 1
    platform = jax.devices()[0].platform
    if args.gpu and platform != "gpu":
        raise SystemExit(f"compare_jax_tridiagonal.py: --gpu, but JAX runs on {platform} (install jax[cuda13])")
    if not args.gpu and platform != "cpu":
        jax.config.update("jax_default_device", jax.devices("cpu")[0])
        platform = "cpu"
    where = "the GPU" if args.gpu else f"{threads} threads"
    print(f"JAX {jax.__version__} on {platform}; {SYSTEMS} systems x {ROWS} rows, float64, "
          f"{where}; milliseconds")
    print(f"{'layout':>12} {'what':>16} {'JAX':>9} {'Tenax':>9} {'JAX/Tenax':>10}")
    for batch_inner in (False, True):
        js, jg = time_jax(batch_inner)
        ts, tg = time_tenax(args.bench, batch_inner, threads, args.gpu)
        name = "batch inner" if batch_inner else "rows inner"
        print(f"{name:>12} {'solve':>16} {js:>9.2f} {ts:>9.2f} {js / ts:>10.2f}", flush=True)
        print(f"{name:>12} {'value + gradient':>16} {jg:>9.2f} {tg:>9.2f} {jg / tg:>10.2f}", flush=True)
    if args.gpu:
        return
    print("one matrix shared by every system (its gradient summed over the systems):")
    for batch_inner in (False, True):
        js, jg = time_jax_shared(batch_inner)
        ts, tg = time_tenax_shared(args.bench, batch_inner, threads)
        name = "batch inner" if batch_inner else "rows inner"
        print(f"{name:>12} {'solve':>16} {js:>9.2f} {ts:>9.2f} {js / ts:>10.2f}", flush=True)
        print(f"{name:>12} {'value + gradient':>16} {jg:>9.2f} {tg:>9.2f} {jg / tg:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
