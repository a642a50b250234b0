// A two-layer LSTM (seed 002's mid-size configuration: 2 layers, 64 units, batch 256; here
// T = 100 steps, float32) as two tenax::scan loops, value + gradient of every weight, under
// different budgets for the steps' kept intermediates: the tape's shared default, none, the
// former 64 MiB per scan, no limit, and tape budgets from 32 to 64 MiB. Reports the host
// allocator's peak beside the time, and the hand-counted minimum a reverse pass that recomputes
// nothing needs (per layer and step: the four gates, c_{t-1} and h_{t-1}). `--lstm_calls=N[,MODE]`
// runs N calls untimed (instruction counts).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <tenax/tenax.h>

namespace {

using namespace tenax;

constexpr int64_t kSteps = 100, kBatch = 256, kUnits = 64, kInputs = 64;

struct Layer {
  Tensor wx, wh, b;
};

Layer layer(Name in, int64_t n_in, uint64_t seed) {
  const double s = 1.0 / 8.0;
  return {randn(Axes{{in, n_in}, {"gate", 4 * kUnits}}, seed, DType::f32) * astype(scalar(s), DType::f32),
          randn(Axes{{"unit", kUnits}, {"gate", 4 * kUnits}}, seed + 1, DType::f32) * astype(scalar(s), DType::f32),
          zeros(Axes{{"gate", 4 * kUnits}}, DType::f32)};
}

Tensor gate(const Tensor& z, int k) { return rename(slice(z, "gate", k * kUnits, (k + 1) * kUnits), "gate", "unit"); }

// One layer over the sequence: carries (h, c) over (batch, unit); outputs h per step.
Tensor run_layer(const Layer& p, const Tensor& xs, Name in, const ScanOptions& opt) {
  ScanBody body = [p, in](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor z = dot(x[0], p.wx, {in}) + dot(c[0], p.wh, {"unit"}) + p.b;
    Tensor i = sigmoid(gate(z, 0)), f = sigmoid(gate(z, 1)), g = tanh(gate(z, 2)), o = sigmoid(gate(z, 3));
    Tensor cell = f * c[1] + i * g;
    Tensor h = o * tanh(cell);
    return std::make_pair(std::vector<Tensor>{h, cell}, std::vector<Tensor>{h});
  };
  const Tensor zero = zeros(Axes{{"batch", kBatch}, {"unit", kUnits}}, DType::f32);
  return scan(body, {zero, zero}, {xs}, "t", opt).ys[0];
}

// One value + gradient of both layers under budget mode `mode`; the allocator's peak during it.
int64_t value_and_gradient(int mode, const Tensor& xs, const Layer& l1, const Layer& l2) {
  ScanOptions opt;
  if (mode == 2) opt.residual_budget = int64_t{64} << 20;
  Tape tape;
  if (mode == 1) tape.set_residual_budget(0);
  if (mode == 2 || mode == 3) tape.set_residual_budget(INT64_MAX);
  if (mode >= 8) tape.set_residual_budget(int64_t{mode} << 20);
  std::vector<Tensor> w;
  for (const Layer* l : {&l1, &l2})
    for (const Tensor* t : {&l->wx, &l->wh, &l->b}) w.push_back(tape.watch(*t));
  allocator_for(Device::cpu()).reset_stats();
  const int64_t base = allocator_stats().bytes_in_use;
  Tensor h1 = run_layer({w[0], w[1], w[2]}, xs, "in", opt);
  Tensor h2 = run_layer({w[3], w[4], w[5]}, rename(h1, "unit", "hid1"), "hid1", opt);
  Tensor loss = sum(h2 * h2);
  std::vector<Tensor> g = tape.gradient(loss, w);
  benchmark::DoNotOptimize(g[0].data_ptr());
  return allocator_stats().peak_bytes - base;
}

Tensor inputs() { return randn(Axes{{"t", kSteps}, {"batch", kBatch}, {"in", kInputs}}, 1, DType::f32); }
// layer 2 reads layer 1's h, its unit axis renamed "hid1"
Layer first_layer() { return layer("in", kInputs, 10); }
Layer second_layer() { return layer("hid1", kUnits, 20); }

void BM_Lstm2_ValueAndGradient(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const Tensor xs = inputs();
  const Layer l1 = first_layer(), l2 = second_layer();
  int64_t peak = 0;
  for (auto _ : state) peak = std::max(peak, value_and_gradient(mode, xs, l1, l2));
  const double mib = 1024.0 * 1024.0;
  state.counters["peak_MiB"] = double(peak) / mib;
  state.counters["min_MiB"] = double(2 * kSteps * 6 * kBatch * kUnits * 4) / mib;
}
BENCHMARK(BM_Lstm2_ValueAndGradient)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Arg(32)
    ->Arg(40)
    ->Arg(48)
    ->Arg(56)
    ->Arg(64)
    // 0: the tape's default, 1: none, 2: 64 MiB per scan (the former default), 3: no limit,
    // 8 and more: the tape's budget in MiB
    ->ArgName("budget")
    ->Unit(benchmark::kMillisecond);

}  // namespace

// `--lstm_calls=N[,MODE]`: N value + gradient calls under budget mode MODE (the benchmark's
// argument; default 0, the tape's default) and nothing else, for instruction counts
// (bench/RESULTS.md: cachegrind at two N, the difference per call).
int main(int argc, char** argv) {
  for (int k = 1; k < argc; ++k)
    if (std::string_view(argv[k]).starts_with("--lstm_calls=")) {
      const Tensor xs = inputs();
      const Layer l1 = first_layer(), l2 = second_layer();
      const char* arg = argv[k] + 13;
      const char* comma = std::strchr(arg, ',');
      const int mode = comma ? std::atoi(comma + 1) : 0;
      for (int call = 0, n = std::atoi(arg); call < n; ++call) (void)value_and_gradient(mode, xs, l1, l2);
      return 0;
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
