// map against nmap over the whole axis (issue 3): value and gradient of a per-slice MLP layer
// h = tanh(W x_b), loss = Σ_b Σ h² over b = 4096 slices of 256 inputs, W 256 x 256 shared.
// Reported: time, and the allocator's peak bytes during the call (peak_MiB), per batch_size and
// parallel_chunks. Goal: time within 1.15x of nmap for batch_size >= 64, peak falling with batch.
#include <benchmark/benchmark.h>

#include <tenax/tenax.h>

namespace {

using namespace tenax;

constexpr int64_t kSlices = 4096, kIn = 256, kOut = 256;

std::vector<Tensor> layer(const std::vector<Tensor>& a) {
  Tensor h = tanh(dot(a[1], a[0], {"k"}));  // a[0]: (k) per slice, a[1]: (j, k) shared
  return {sum(h * h)};
}

void run(benchmark::State& state, int64_t batch, int64_t parallel) {
  Tensor x = randn(Axes{{"b", kSlices}, {"k", kIn}}, 1);
  Tensor w = randn(Axes{{"j", kOut}, {"k", kIn}}, 2) * (1.0 / 16.0);
  double peak = 0;
  for (auto _ : state) {
    allocator_for(Device::cpu()).reset_stats();
    const int64_t before = allocator_stats().bytes_in_use;
    auto [v, g] = value_and_grad(
        [&](const std::vector<Tensor>& a) {
          if (batch == 0) return sum(nmap(layer, {"b"}, a)[0]);
          MapOptions o;
          o.batch_size = batch;
          o.parallel_chunks = parallel;
          return sum(map(layer, "b", a, o)[0]);
        },
        {x, w});
    benchmark::DoNotOptimize(g[1].data_ptr());
    peak = double(allocator_stats().peak_bytes - before) / (1024.0 * 1024.0);
  }
  state.counters["peak_MiB"] = peak;
}

void BM_Map_FullNmap(benchmark::State& state) { run(state, 0, 1); }
BENCHMARK(BM_Map_FullNmap)->Unit(benchmark::kMillisecond);

void BM_Map_Batch(benchmark::State& state) { run(state, state.range(0), state.range(1)); }
BENCHMARK(BM_Map_Batch)
    ->ArgNames({"batch", "parallel"})
    ->ArgsProduct({{16, 64, 256, 1024}, {1, 2}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
