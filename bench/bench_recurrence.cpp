// The scalar recurrence of issue 3: x_t = λ x_{t-1} + u_t (x_{-1} = 0), loss = Σ x_t², T = 100 000;
// value and gradient w.r.t. λ and every u_t. Baseline in the same run: a hand-written forward and
// adjoint loop. Reported per step (ns) and as tape bytes per step. The scan runs with its steps fused
// into one scalar loop (the default) and call by call, in the same run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include <tenax/tenax.h>

#include "tenax/core/ops/scalar_loop.h"

namespace {

using namespace tenax;

constexpr int64_t kSteps = 100000;

std::vector<double> inputs() {
  Tensor u = randn(Axes{{"t", kSteps}}, 7);
  return u.to_vector();
}

void per_step(benchmark::State& state) {
  state.counters["ns_per_step"] = benchmark::Counter(
      double(kSteps), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Baseline: forward keeps x, the reverse sweep is the adjoint recurrence written by hand.
void BM_Recurrence_HandWritten(benchmark::State& state) {
  std::vector<double> u = inputs(), x(static_cast<size_t>(kSteps)), du(static_cast<size_t>(kSteps));
  const double lambda = 0.9;
  for (auto _ : state) {
    double s = 0, loss = 0;
    for (int64_t t = 0; t < kSteps; ++t) {
      s = lambda * s + u[size_t(t)];
      x[size_t(t)] = s;
      loss += s * s;
    }
    double adj = 0, dlambda = 0;
    for (int64_t t = kSteps - 1; t >= 0; --t) {
      adj = 2 * x[size_t(t)] + lambda * adj;
      du[size_t(t)] = adj;
      if (t > 0) dlambda += adj * x[size_t(t - 1)];
    }
    benchmark::DoNotOptimize(loss);
    benchmark::DoNotOptimize(dlambda);
    benchmark::DoNotOptimize(du.data());
  }
  per_step(state);
}
BENCHMARK(BM_Recurrence_HandWritten)->Unit(benchmark::kMicrosecond);

// Tenax: linear_recurrence with a decay that has no time axis, then Σ x².
void BM_Recurrence_LinearRecurrence(benchmark::State& state) {
  Tensor u0 = tensor(inputs(), Axes{{"t", kSteps}});
  Tensor lambda0 = scalar(0.9);
  for (auto _ : state) {
    Tape tape;
    Tensor lambda = tape.watch(lambda0), u = tape.watch(u0);
    Tensor loss = sum(square(linear_recurrence(lambda, u, "t")));
    auto g = tape.gradient(loss, {lambda, u});
    benchmark::DoNotOptimize(g[1].data_ptr());
    state.counters["tape_bytes_per_step"] = double(tape.bytes()) / double(kSteps);
  }
  per_step(state);
}
BENCHMARK(BM_Recurrence_LinearRecurrence)->Unit(benchmark::kMicrosecond);

// Tenax: the same recurrence as an associative_scan over (a, b) pairs (parallel prefix, log2 T
// vectorised levels, O(T log T) work): what the JAX idiom costs here.
void BM_Recurrence_AssociativeScan(benchmark::State& state) {
  Tensor u0 = tensor(inputs(), Axes{{"t", kSteps}});
  Tensor lambda0 = scalar(0.9);
  AssociativeFn affine = [](const std::vector<Tensor>& p, const std::vector<Tensor>& q) {
    return std::vector<Tensor>{p[0] * q[0], q[0] * p[1] + q[1]};
  };
  for (auto _ : state) {
    Tape tape;
    Tensor lambda = tape.watch(lambda0), u = tape.watch(u0);
    Tensor a = broadcast(lambda, Axes{{"t", kSteps}});
    Tensor x = associative_scan(affine, {a, u}, "t")[1];
    auto g = tape.gradient(sum(square(x)), {lambda, u});
    benchmark::DoNotOptimize(g[1].data_ptr());
    state.counters["tape_bytes_per_step"] = double(tape.bytes()) / double(kSteps);
  }
  per_step(state);
}
BENCHMARK(BM_Recurrence_AssociativeScan)->Unit(benchmark::kMillisecond);

// Tenax: the same recurrence as a scan whose body is one multiply-add; loss on the stacked ys.
// Argument fused 1: the steps run as one fused scalar loop (the default); 0: call by call (for the
// comparison; detail::set_scalar_loops). Argument ck: checkpoint_every; 0: a memory budget of 64
// carries (recursive bisection).
void BM_Recurrence_Scan(benchmark::State& state) {
  detail::set_scalar_loops(state.range(0) != 0);
  ScanOptions opt;
  opt.checkpoint_every = std::max<int64_t>(state.range(1), 1);
  opt.memory_budget = state.range(1) == 0 ? 64 * 8 : 0;
  Tensor u0 = tensor(inputs(), Axes{{"t", kSteps}});
  Tensor lambda0 = scalar(0.9);
  for (auto _ : state) {
    Tape tape;
    Tensor lambda = tape.watch(lambda0), u = tape.watch(u0);
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = lambda * c[0] + x[0];
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
    };
    ScanResult r = scan(body, {scalar(0.0)}, {u}, "t", opt);
    Tensor loss = sum(square(r.ys[0]));
    auto g = tape.gradient(loss, {lambda, u});
    benchmark::DoNotOptimize(g[1].data_ptr());
    state.counters["tape_bytes_per_step"] = double(tape.bytes()) / double(kSteps);
    state.counters["residual_bytes_per_step"] = double(tape.stats().residual_bytes) / double(kSteps);
  }
  detail::set_scalar_loops(true);
  per_step(state);
}
BENCHMARK(BM_Recurrence_Scan)
    ->ArgNames({"fused", "ck"})
    ->Args({1, 1})
    ->Args({0, 1})
    ->Args({1, 16})
    ->Args({0, 16})
    ->Args({1, 0})
    ->Args({0, 0})
    ->Unit(benchmark::kMillisecond);

// Forward only, for the split between the passes.
void BM_Recurrence_ScanForward(benchmark::State& state) {
  detail::set_scalar_loops(state.range(0) != 0);
  Tensor u = tensor(inputs(), Axes{{"t", kSteps}});
  Tensor lambda = scalar(0.9);
  ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = lambda * c[0] + x[0];
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
  };
  for (auto _ : state) {
    ScanResult r = scan(body, {scalar(0.0)}, {u}, "t");
    benchmark::DoNotOptimize(r.ys[0].data_ptr());
  }
  detail::set_scalar_loops(true);
  per_step(state);
}
BENCHMARK(BM_Recurrence_ScanForward)->ArgName("fused")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
