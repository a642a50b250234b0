"""Seed 000 side by side: the S5 recurrence x_t = λ ⊙ x_{t-1} + W u_t + b in complex128 (state 64,
input 8, 16 sequences), the Jacobians of the final state w.r.t. λ, W and u, in JAX (jax.lax.scan and
the seed's jax.lax.associative_scan, jit(vmap(jacrev / jacfwd)) as the seed measures them) and in
Tenax (bench_s5's complex128 benchmarks: scan, linear_recurrence and associative_scan).

First the values: bench_s5 --s5_values=T prints one sequence's inputs and Tenax's Jacobians (both
implementations, both modes); JAX computes its own from the same inputs and every entry must agree
to 1e-12 (relative to the largest entry). JAX's conventions match Tenax's here: the λ- and W-
Jacobians are holomorphic (jacrev/jacfwd with holomorphic=True), the u-Jacobian is ∂x/∂u of a real
argument (jacfwd; jacrev of the real and imaginary parts).

Then the times: milliseconds per call (16 sequences) at T = 32 ... 512 and the slope in T, JAX and
Tenax measured in the same sitting (JAX first, then one bench_s5 run), with the ratio.

    python3 bench/compare_jax_s5.py [--bench build/release/bench/bench_s5] [--layers 1] [--reps 5]
                                    [--one-thread] [--jax-only]

Tenax runs one thread (TENAX_NUM_THREADS=1); --one-thread limits XLA to one too (the fair
comparison; without it JAX uses every core). Optional: needs `pip install 'jax[cpu]'` (not a Tenax
dependency).
"""
import argparse
import json
import os
import subprocess
import sys
import time

if "--one-thread" in sys.argv:  # before jax is imported
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

try:
    import jax
    import jax.numpy as jnp
    import numpy as np
except ImportError:
    print("compare_jax_s5.py: JAX is not installed (pip install 'jax[cpu]'); nothing to compare", file=sys.stderr)
    sys.exit(0)

jax.config.update("jax_enable_x64", True)

STATE, INPUT, BATCH = 64, 8, 16
STEPS = [32, 128, 512]  # of bench_s5's 32, 64, ..., 512


def layer_scan(lam, W, b, x0, u):
    def step(h, ut):
        h = lam * h + W @ ut + b
        return h, h
    _, hs = jax.lax.scan(step, x0, u)
    return hs


def layer_associative(lam, W, b, x0, u):
    bu = u @ W.T + b
    bu = bu.at[0].add(lam * x0)
    a = jnp.broadcast_to(lam, bu.shape)

    def combine(left, right):
        a_i, b_i = left
        a_j, b_j = right
        return a_j * a_i, a_j * b_i + b_j
    _, hs = jax.lax.associative_scan(combine, (a, bu))
    return hs


def final_state(layer, params, u):
    x = u.astype(jnp.complex128)
    for lam, W, b, x0 in params:
        x = layer(lam, W, b, x0, x)
    return x[-1]


def jacobian(layer, params, u, wrt, mode):
    """The Jacobian of the final state w.r.t. the first layer's λ or W, or u (Tenax's axis order)."""
    def of(arg):
        p = [list(q) for q in params]
        if wrt == "lambda":
            p[0][0] = arg
        elif wrt == "W":
            p[0][1] = arg
        return final_state(layer, p, u if wrt != "u" else arg)
    arg = params[0][0] if wrt == "lambda" else params[0][1] if wrt == "W" else u
    if wrt == "u":  # a real argument of a complex output
        if mode == "forward":
            return jax.jacfwd(of)(arg)
        return jax.jacrev(lambda a: jnp.real(of(a)))(arg) + 1j * jax.jacrev(lambda a: jnp.imag(of(a)))(arg)
    return (jax.jacfwd if mode == "forward" else jax.jacrev)(of, holomorphic=True)(arg)


def from_json(t):
    return (np.array(t["re"]) + 1j * np.array(t["im"])).reshape(t["shape"])


def check_values(bench, steps):
    out = subprocess.run([bench, f"--s5_values={steps}"], check=True, capture_output=True, text=True).stdout
    v = json.loads(out)
    params = [(from_json(v["lambda"]), from_json(v["W"]), from_json(v["b"]), from_json(v["x0"]))]
    u = from_json(v["u"]).real
    worst = 0.0
    for key, tenax in v.items():
        if "/" not in key:
            continue
        impl, mode, wrt = key.split("/")
        j = np.asarray(jacobian(layer_scan, params, u, wrt, mode))
        t = from_json(tenax)
        err = float(np.max(np.abs(j - t)) / max(np.max(np.abs(j)), 1e-300))
        worst = max(worst, err)
        print(f"  {key:36s} max |JAX - Tenax| / max |J| = {err:.2e}")
    print(f"values at T = {steps}: worst relative difference {worst:.2e} ({'OK' if worst <= 1e-12 else 'MISMATCH'})")
    return worst <= 1e-12


def jax_params(layers, key):
    params = []
    for l in range(layers):
        k = jax.random.split(jax.random.fold_in(key, l), 5)
        n_in = INPUT if l == 0 else STATE
        rho = jax.nn.sigmoid(jax.random.normal(k[0], (STATE,)) + 2.0)
        theta = jax.random.uniform(k[1], (STATE,), minval=-0.785, maxval=0.785)
        W = (jax.random.normal(k[2], (STATE, n_in)) + 1j * jax.random.normal(k[3], (STATE, n_in))) / n_in
        b = 0.1 * (jax.random.normal(k[4], (STATE,)) + 1j * jax.random.normal(k[4], (STATE,)))
        x0 = jax.random.normal(k[0], (STATE,)) + 1j * jax.random.normal(k[1], (STATE,))
        params.append((rho * jnp.exp(1j * theta), W, b, x0))
    return params


def time_jax(layer, layers, wrt, mode, steps, reps):
    params = jax_params(layers, jax.random.PRNGKey(0))
    us = jax.random.normal(jax.random.PRNGKey(1), (BATCH, steps, INPUT))
    f = jax.jit(jax.vmap(lambda u: jacobian(layer, params, u, wrt, mode)))
    jax.block_until_ready(f(us))
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(us))
        best.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(best))


def time_tenax(bench, layers, reps):
    sizes = "|".join(str(t) for t in STEPS)
    filt = f"S5/(scan|linear_recurrence|associative_scan)/layers:{layers}/complex128/jac_(lambda|W|u)/(forward_mode/)?({sizes})/"
    out = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json",
                          f"--benchmark_repetitions={reps}", "--benchmark_report_aggregates_only=true"],
                         check=True, capture_output=True, text=True, env=dict(os.environ, TENAX_NUM_THREADS="1")).stdout
    times = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].split("/min_time")[0]
        times[name] = b["real_time"]  # ms
    return times


def slope(ts):
    x = np.array(STEPS, dtype=float)
    return float(np.polyfit(x, np.array(ts), 1)[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/release/bench/bench_s5")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--values-only", action="store_true")
    ap.add_argument("--one-thread", action="store_true", help="XLA on one thread, as Tenax runs here")
    ap.add_argument("--jax-only", action="store_true", help="time JAX only (Tenax's figures from an earlier run)")
    a = ap.parse_args()
    if not os.path.exists(a.bench):
        raise SystemExit("compare_jax_s5.py: build bench_s5 first (bash scripts/bench.sh bench_s5) or pass --bench")
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}, complex128")
    ok = check_values(a.bench, 32)
    if a.values_only:
        sys.exit(0 if ok else 1)
    tenax = {} if a.jax_only else time_tenax(a.bench, a.layers, a.reps)
    print(f"XLA threads: {'one' if a.one_thread else 'all cores'}; Tenax: one")
    print(f"\nms per call (16 sequences), {a.layers} layer(s); slope in ms per step")
    print(f"{'Jacobian':28s} {'JAX scan':>10s} {'JAX assoc':>10s} {'Tenax scan':>11s} {'Tenax lin.rec':>13s} "
          f"{'Tenax assoc':>11s}  (T = {STEPS[-1]}; slopes below)")
    for wrt in ["lambda", "W", "u"]:
        for mode in ["reverse", "forward"]:
            js = [time_jax(layer_scan, a.layers, wrt, mode, t, a.reps) for t in STEPS]
            ja = [time_jax(layer_associative, a.layers, wrt, mode, t, a.reps) for t in STEPS]
            suffix = "" if mode == "reverse" else "/forward_mode"
            ts = [tenax.get(f"S5/scan/layers:{a.layers}/complex128/jac_{wrt}{suffix}/{t}", float("nan")) for t in STEPS]
            tr = [tenax.get(f"S5/linear_recurrence/layers:{a.layers}/complex128/jac_{wrt}{suffix}/{t}", float("nan"))
                  for t in STEPS]
            tq = [tenax.get(f"S5/associative_scan/layers:{a.layers}/complex128/jac_{wrt}{suffix}/{t}", float("nan"))
                  for t in STEPS]
            name = f"{wrt} {mode}"
            print(f"{name:28s} {js[-1]:10.2f} {ja[-1]:10.2f} {ts[-1]:11.2f} {tr[-1]:13.2f} {tq[-1]:11.2f}")
            print(f"{'  slope':28s} {slope(js):10.4f} {slope(ja):10.4f} {slope(ts):11.4f} {slope(tr):13.4f} {slope(tq):11.4f}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
