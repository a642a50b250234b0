// Scans on the GPU against the CPU (issue 5): per-step time of the Kalman likelihood + gradient
// (the JSON model, Model::set_device), of the scalar recurrence written with scan and with
// linear_recurrence, and of the batch of linear recurrences x_t = λ ⊙ x_{t-1} + W u_t + b
// (state 64, batch 16) written with scan, and a batch of large matrix products (cuBLAS on the GPU).
// Every benchmark takes the device as its first argument
// (0 = host, 1 = cuda:0) and reports ns_per_step and, on the GPU, launches_per_step (kernel
// launches Tenax made, a cuSPARSE call counting one) and kernels_per_step (kernels the device ran:
// a graph launch runs all its nodes, a fused chain is one). TENAX_CUDA_FUSION=0 and
// TENAX_CUDA_GRAPHS=0 turn the fused chains and the graphs off for comparison. Without a GPU the
// device runs are skipped.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include <tenax/tenax.h>

#include "kalman.h"
#include "tenax/backends/kernels.h"

namespace {

using namespace tenax;

Device device_of(benchmark::State& state) {
  if (state.range(0) == 0) return Device::cpu();
  if (detail::cuda_device_count() == 0) state.SkipWithError("no CUDA device visible");
  return Device::cuda(0);
}

// Waits for the device: reading a tensor back orders after every kernel of the stream.
double fetch(const Tensor& t) { return to(t, Device::cpu()).to_vector()[0]; }
// The same, copying one element only (a view of the first), for large results.
double fetch_first(Tensor t) {
  while (t.rank() > 0) t = select(t, t.axes().name(0), 0);
  return fetch(t);
}

// Launches Tenax made and kernels the device ran (a graph launch runs all its nodes) so far.
struct Counts {
  int64_t launches = 0, kernels = 0;
};
Counts counts() { return {detail::cuda_kernel_launches(), detail::cuda_kernels_run()}; }

// Counters per step; launches and kernels counted from `c0` over all iterations.
void per_step(benchmark::State& state, int64_t steps, const Counts& c0) {
  state.counters["ns_per_step"] = benchmark::Counter(
      double(steps), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  if (state.range(0) == 0 || state.iterations() == 0) return;
  const double per = double(state.iterations()) * double(steps);
  const Counts c = counts();
  state.counters["launches_per_step"] = double(c.launches - c0.launches) / per;
  state.counters["kernels_per_step"] = double(c.kernels - c0.kernels) / per;
}

// args: device, series, T. The shipped Kalman model at state dimension 4, value + gradient.
void BM_Kalman_ValueAndGrad(benchmark::State& state) {
  const Device d = device_of(state);
  const int64_t series = state.range(1), steps = state.range(2);
  nlohmann::json doc = kalman::default_model();
  doc["axes"]["series"] = series;
  doc["axes"]["time"] = steps;
  Model mod = load_model_json(doc);
  const Tensor y = randn(Axes{{"series", series}, {"time", steps}, {"obs", 2}}, 3);
  const double want = mod.run("loglik", {{"y", y}}).item();
  if (state.error_occurred()) return;
  mod.set_device(d);
  const TensorMap in = {{"y", to(y, d)}};
  if (std::abs(fetch(mod.run("loglik", in)) - want) > 1e-9 * std::abs(want))
    state.SkipWithError("the device's log-likelihood differs from the host's");
  const Counts c0 = counts();
  for (auto _ : state) {
    ModelGradient g = mod.value_and_grad("loglik", in);
    benchmark::DoNotOptimize(fetch(g.value) + fetch(g.grads.back()));
  }
  per_step(state, steps, c0);
}
BENCHMARK(BM_Kalman_ValueAndGrad)
    ->Args({0, 1, 1000})
    ->Args({1, 1, 1000})
    ->Args({0, 256, 1000})
    ->Args({1, 256, 1000})
    ->Args({0, 4096, 100})
    ->Args({1, 4096, 100})
    ->ArgNames({"gpu", "series", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// args: device, T. x_t = λ x_{t-1} + u_t, loss = Σ x_t², value + gradient w.r.t. λ and u.
void BM_Recurrence_ScanValueAndGrad(benchmark::State& state) {
  const Device d = device_of(state);
  const int64_t steps = state.range(1);
  if (state.error_occurred()) return;
  const std::vector<Tensor> args{to(scalar(0.9), d), to(randn(Axes{{"t", steps}}, 7), d)};
  auto loss = [&](const std::vector<Tensor>& a) {
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = a[0] * c[0] + x[0];
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
    };
    return sum(square(scan(body, {to(scalar(0.0), d)}, {a[1]}, "t").ys[0]));
  };
  const Counts c0 = counts();
  for (auto _ : state) {
    auto [v, g] = value_and_grad(loss, args);
    benchmark::DoNotOptimize(fetch(v) + fetch(g[0]));
  }
  per_step(state, steps, c0);
}
BENCHMARK(BM_Recurrence_ScanValueAndGrad)
    ->Args({0, 20000})
    ->Args({1, 20000})
    ->ArgNames({"gpu", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same recurrence with linear_recurrence (one kernel forwards, one backwards).
void BM_Recurrence_LinearRecurrence(benchmark::State& state) {
  const Device d = device_of(state);
  const int64_t steps = state.range(1);
  if (state.error_occurred()) return;
  const std::vector<Tensor> args{to(scalar(0.9), d), to(randn(Axes{{"t", steps}}, 7), d)};
  auto loss = [](const std::vector<Tensor>& a) { return sum(square(linear_recurrence(a[0], a[1], "t"))); };
  const Counts c0 = counts();
  for (auto _ : state) {
    auto [v, g] = value_and_grad(loss, args);
    benchmark::DoNotOptimize(fetch(v) + fetch(g[0]));
  }
  per_step(state, steps, c0);
}
BENCHMARK(BM_Recurrence_LinearRecurrence)
    ->Args({0, 100000})
    ->Args({1, 100000})
    ->ArgNames({"gpu", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// args: device, T, with_grad. Batch 16 of x_t = λ ⊙ x_{t-1} + W u_t + b, state 64, inputs 64,
// loss Σ x_T² + Σ_t Σ x_t; gradient w.r.t. λ, W, b, x0 and u.
void BM_BatchedRecurrence_Scan(benchmark::State& state) {
  const Device d = device_of(state);
  const int64_t steps = state.range(1);
  const bool grad = state.range(2) != 0;
  if (state.error_occurred()) return;
  const std::vector<Tensor> args{
      to(uniform(Axes{{"s", 64}}, 1, 0.5, 0.99), d), to(randn(Axes{{"s", 64}, {"k", 64}}, 2) * 0.1, d),
      to(randn(Axes{{"s", 64}}, 3), d), to(randn(Axes{{"b", 16}, {"s", 64}}, 4), d),
      to(randn(Axes{{"t", steps}, {"b", 16}, {"k", 64}}, 5), d)};
  auto loss = [](const std::vector<Tensor>& a) {
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = a[0] * c[0] + dot(a[1], x[0], {"k"}) + a[2];
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{sum(next)});
    };
    ScanResult r = scan(body, {a[3]}, {a[4]}, "t");
    return sum(square(r.carry[0])) + sum(r.ys[0]);
  };
  const Counts c0 = counts();
  for (auto _ : state) {
    if (grad) {
      auto [v, g] = value_and_grad(loss, args);
      benchmark::DoNotOptimize(fetch(v) + fetch(g[0]));
    } else {
      benchmark::DoNotOptimize(fetch(loss(args)));
    }
  }
  per_step(state, steps, c0);
}
BENCHMARK(BM_BatchedRecurrence_Scan)
    ->Args({0, 512, 0})
    ->Args({1, 512, 0})
    ->Args({0, 512, 1})
    ->Args({1, 512, 1})
    ->ArgNames({"gpu", "T", "grad"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// args: device, n. A batch of 32 products of n x n matrices (dot over k), value only: on the GPU
// through cuBLAS strided-batched gemm; reported as GFLOP per second.
void BM_BatchedMatmul(benchmark::State& state) {
  const Device d = device_of(state);
  const int64_t n = state.range(1);
  const Tensor x = to(randn(Axes{{"b", 32}, {"m", n}, {"k", n}}, 1), d);
  const Tensor y = to(randn(Axes{{"b", 32}, {"k", n}, {"n", n}}, 2), d);
  if (state.error_occurred()) return;
  benchmark::DoNotOptimize(fetch_first(dot(x, y, {"k"})));  // loads cuBLAS, fills the pool
  for (auto _ : state) benchmark::DoNotOptimize(fetch_first(dot(x, y, {"k"})));
  state.counters["GFLOP"] =
      benchmark::Counter(2.0 * 32 * double(n * n * n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BatchedMatmul)
    ->Args({0, 256})
    ->Args({1, 256})
    ->Args({0, 1024})
    ->Args({1, 1024})
    ->ArgNames({"gpu", "n"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
