// scan's per-step cost on a 10-op body over 4-element tensors (issue 3 goal (a)): forward, and
// forward + backward, against the same body unrolled onto the tape and a hand-written loop with a
// hand-written adjoint, all in the same run.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include <tenax/tenax.h>

namespace {

using namespace tenax;

constexpr int64_t kSteps = 1000;

// Ten ops: h <- exp(0.1 * (sigmoid(tanh(h*a + x)*b + a) * tanh(h*a + x) - x)).
Tensor body10(const Tensor& h, const Tensor& x, const Tensor& a, const Tensor& b) {
  Tensor h3 = tanh(h * a + x);               // 3 ops
  Tensor h6 = sigmoid(h3 * b + a);           // 3 ops
  return exp((h6 * h3 - x) * scalar(0.1));   // 4 ops
}

struct Inputs10 {
  Tensor a = tensor({0.5, -0.3, 0.8, 0.1}, "i"), b = tensor({1.1, 0.9, -0.7, 0.4}, "i");
  Tensor h0 = tensor({0.1, 0.2, 0.3, 0.4}, "i");
  Tensor xs = randn(Axes{{"t", kSteps}, {"i", 4}}, 3);
};

void per_step(benchmark::State& state) {
  state.counters["ns_per_step"] = benchmark::Counter(
      double(kSteps), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

ScanBody scan_body(const Tensor& a, const Tensor& b) {
  return [a, b](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor h = body10(c[0], x[0], a, b);
    return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{});
  };
}

void BM_Body10_ScanForward(benchmark::State& state) {
  Inputs10 in;
  for (auto _ : state) {
    ScanResult r = scan(scan_body(in.a, in.b), {in.h0}, {in.xs}, "t");
    benchmark::DoNotOptimize(r.carry[0].data_ptr());
  }
  per_step(state);
}
BENCHMARK(BM_Body10_ScanForward)->Unit(benchmark::kMicrosecond);

void BM_Body10_ScanForwardBackward(benchmark::State& state) {
  Inputs10 in;
  for (auto _ : state) {
    Tape tape;
    Tensor a = tape.watch(in.a), b = tape.watch(in.b), h0 = tape.watch(in.h0), xs = tape.watch(in.xs);
    ScanResult r = scan(scan_body(a, b), {h0}, {xs}, "t");
    auto g = tape.gradient(sum(r.carry[0]), {a, b, h0, xs});
    benchmark::DoNotOptimize(g[3].data_ptr());
  }
  per_step(state);
}
BENCHMARK(BM_Body10_ScanForwardBackward)->Unit(benchmark::kMicrosecond);

// The same loop unrolled op by op onto the tape (what a scan without a plan costs).
void BM_Body10_TapeUnrolledForwardBackward(benchmark::State& state) {
  Inputs10 in;
  for (auto _ : state) {
    Tape tape;
    Tensor a = tape.watch(in.a), b = tape.watch(in.b), h = tape.watch(in.h0), xs = tape.watch(in.xs);
    Tensor h0 = h;
    for (int64_t t = 0; t < kSteps; ++t) h = body10(h, select(xs, "t", t), a, b);
    auto g = tape.gradient(sum(h), {a, b, h0, xs});
    benchmark::DoNotOptimize(g[3].data_ptr());
  }
  per_step(state);
}
BENCHMARK(BM_Body10_TapeUnrolledForwardBackward)->Unit(benchmark::kMicrosecond);

// Baseline: hand-written forward (keeping what the adjoint needs) and hand-written adjoint.
void BM_Body10_HandWritten(benchmark::State& state) {
  Inputs10 in;
  std::vector<double> a = in.a.to_vector(), b = in.b.to_vector(), xs = in.xs.to_vector();
  std::vector<double> hs(static_cast<size_t>((kSteps + 1) * 4)), da(4), db(4), dxs(xs.size());
  for (auto _ : state) {
    for (int i = 0; i < 4; ++i) hs[size_t(i)] = in.h0.to_vector()[size_t(i)];
    for (int64_t t = 0; t < kSteps; ++t)
      for (size_t i = 0; i < 4; ++i) {
        const double h = hs[size_t(t) * 4 + i], x = xs[size_t(t) * 4 + i];
        const double h3 = std::tanh(h * a[i] + x), h6 = 1 / (1 + std::exp(-(h3 * b[i] + a[i])));
        hs[size_t(t + 1) * 4 + i] = std::exp((h6 * h3 - x) * 0.1);
      }
    double gh[4] = {1, 1, 1, 1};
    for (size_t i = 0; i < 4; ++i) da[i] = db[i] = 0;
    for (int64_t t = kSteps - 1; t >= 0; --t)
      for (size_t i = 0; i < 4; ++i) {
        const double h = hs[size_t(t) * 4 + i], x = xs[size_t(t) * 4 + i];
        const double h3 = std::tanh(h * a[i] + x), z = h3 * b[i] + a[i], h6 = 1 / (1 + std::exp(-z));
        const double out = hs[size_t(t + 1) * 4 + i];
        const double d_in = gh[i] * out * 0.1;  // d/d(h6*h3 - x)
        const double dh6 = d_in * h3, dz = dh6 * h6 * (1 - h6);
        const double dh3 = d_in * h6 + dz * b[i], dpre = dh3 * (1 - h3 * h3);
        da[i] += dz + dpre * h;
        db[i] += dz * h3;
        dxs[size_t(t) * 4 + i] = dpre - d_in;
        gh[i] = dpre * a[i];
      }
    benchmark::DoNotOptimize(da.data());
    benchmark::DoNotOptimize(dxs.data());
  }
  per_step(state);
}
BENCHMARK(BM_Body10_HandWritten)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
