#!/usr/bin/env python3
"""The Kalman log-likelihood + gradient of bench_kalman, written with jax.lax.scan + jax.grad (vmap
over series), timed side by side with Tenax's bench_kalman on the same configurations.

    python3 bench/compare_jax.py [--bench build/release/bench/bench_kalman] [--state 4] [--series 1]

Prints, per configuration, microseconds per series-step for JAX (CPU, float64, jit-compiled,
compile time excluded) and Tenax, and the ratio JAX / Tenax (> 1: Tenax is faster). JAX is optional:
without it the script says so and exits with status 2.
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
    print("compare_jax.py: JAX is not installed (pip install 'jax[cpu]'); nothing to compare", file=sys.stderr)
    sys.exit(2)

jax.config.update("jax_enable_x64", True)
OBS = 2
HALF_LOG_2PI = 0.91893853320467274178


def parameters(n):
    """The same matrices as bench_kalman's model(n)."""
    eye = jnp.eye(n)
    F = 0.9 * eye + 0.05 * jnp.eye(n, k=1)
    Q = 0.1 * eye + 0.02 * (jnp.eye(n, k=1) + jnp.eye(n, k=-1))
    H = jnp.zeros((OBS, n)).at[0, 0].set(1.0).at[1, 0].set(0.5)
    if n > 1:
        H = H.at[1, 1].set(1.0)
    r = jnp.full((OBS,), 0.5)
    return F, Q, H, r


def loglik(params, y):
    """One series: y (T, OBS). Cholesky of S, triangular solves, symmetrised update (as the model)."""
    F, Q, H, r = params
    n = F.shape[0]

    def step(carry, yt):
        m, P, ll = carry
        mp = F @ m
        Pp = F @ P @ F.T + Q
        v = yt - H @ mp
        HP = H @ Pp
        S = HP @ H.T + jnp.diag(r)
        L = jnp.linalg.cholesky(S)
        w = jax.scipy.linalg.solve_triangular(L, v, lower=True)
        B = jax.scipy.linalg.solve_triangular(L, HP, lower=True)
        m = mp + B.T @ w
        P = Pp - B.T @ B
        P = 0.5 * (P + P.T)
        ll = ll - 0.5 * jnp.sum(w * w) - jnp.sum(jnp.log(jnp.diag(L)) + HALF_LOG_2PI)
        return (m, P, ll), None

    (_, _, ll), _ = jax.lax.scan(step, (jnp.zeros(n), jnp.eye(n), 0.0), y)
    return ll


def total(params, ys):
    return jnp.sum(jax.vmap(loglik, in_axes=(None, 0))(params, ys))


def time_jax(n, series, steps, reps=5):
    params = parameters(n)
    ys = jax.random.normal(jax.random.PRNGKey(3), (series, steps, OBS))
    f = jax.jit(jax.value_and_grad(total))
    v, g = f(params, ys)
    jax.block_until_ready(g)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        v, g = f(params, ys)
        jax.block_until_ready(g)
        best = min(best, time.perf_counter() - t0)
    return best / (series * steps) * 1e6


def time_tenax(bench, n, series, steps):
    filt = f"BM_Kalman_TenaxValueAndGrad/state:{n}/series:{series}/T:{steps}$"
    out = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json", "--benchmark_min_time=0.3"],
                         check=True, capture_output=True, text=True).stdout
    runs = json.loads(out)["benchmarks"]
    if not runs:
        raise SystemExit(f"compare_jax.py: {bench} has no benchmark {filt}")
    return runs[0]["ns_per_series_step"] * 1e6  # the inverted rate counter is in seconds


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bench = next((p for p in (os.path.join(here, "..", d, "bench", "bench_kalman") for d in ("build/bench", "build/release"))
                          if os.path.exists(p)), None)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=default_bench, help="path of the bench_kalman executable")
    ap.add_argument("--state", type=int, nargs="*", default=[2, 4, 8, 16])
    ap.add_argument("--series", type=int, nargs="*", default=[1, 256])
    args = ap.parse_args()
    if not args.bench or not os.path.exists(args.bench):
        raise SystemExit("compare_jax.py: build bench_kalman first (bash scripts/bench.sh bench_kalman) or pass --bench")
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; microseconds per series-step, value + gradient")
    print(f"{'state':>5} {'series':>6} {'T':>5} {'JAX':>10} {'Tenax':>10} {'JAX/Tenax':>10}")
    for n in args.state:
        for s in args.series:
            steps = 1000 if s == 1 else 200
            tj = time_jax(n, s, steps)
            tt = time_tenax(args.bench, n, s, steps)
            print(f"{n:>5} {s:>6} {steps:>5} {tj:>10.3f} {tt:>10.3f} {tj / tt:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
