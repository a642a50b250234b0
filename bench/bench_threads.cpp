// Where a second thread pays, kernel by kernel: each parallel host kernel family (an elementwise
// add, exp, a transposing copy, a matrix product, the tridiagonal solve) at sizes from below its
// one-thread threshold (backends/cpu/parallel.h) to well above it, in a oneTBB task_arena of one
// thread and of two in the same run. Below a threshold both rows run the same serial code; above
// it the two-thread row splits. bench/RESULTS.md records the ratios the thresholds rest on.
//
//   bench_threads --benchmark_filter='BM_Threads/family:0/'   (one family; 0 add ... 4 tridiagonal)
#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstdint>

#include <tenax/tenax.h>

namespace {

using namespace tenax;

enum Family { kAdd, kExp, kTranspose, kDot, kTridiagonal };

// One call of the family's kernel on operands of about `n` elements (for the product: n multiply-
// adds); returns the output so the call cannot be dropped.
struct Case {
  Family family;
  int64_t n;
  Tensor a, b, c, d;

  Case(Family f, int64_t size) : family(f), n(size) {
    switch (f) {
      case kAdd:
      case kExp:
        a = randn(Axes{{"r", n / 256}, {"c", 256}}, 1);
        b = randn(Axes{{"r", n / 256}, {"c", 256}}, 2);
        break;
      case kTranspose: {
        const auto s = static_cast<int64_t>(std::lround(std::sqrt(double(n))));
        a = randn(Axes{{"r", s}, {"c", s}}, 1);
        break;
      }
      case kDot: {
        const auto s = static_cast<int64_t>(std::lround(std::cbrt(double(n))));
        a = randn(Axes{{"i", s}, {"k", s}}, 1);
        b = randn(Axes{{"k", s}, {"j", s}}, 2);
        break;
      }
      case kTridiagonal: {
        const Axes ax{{"s", std::max<int64_t>(1, n / 100)}, {"i", 100}};
        a = full(ax, -1.0);
        b = full(ax, 4.0) + uniform(ax, 3);
        c = full(ax, -1.0);
        d = randn(ax, 4);
        break;
      }
    }
  }

  [[nodiscard]] Tensor run() const {
    switch (family) {
      case kAdd: return a + b;
      case kExp: return exp(a);
      case kTranspose: return contiguous(transpose(a, {"c", "r"}));
      case kDot: return dot(a, b, {"k"});
      case kTridiagonal: return tridiagonal_solve(a, b, c, d, "i");
    }
    return {};
  }
};

void BM_Threads(benchmark::State& state) {
  const Case c(static_cast<Family>(state.range(0)), int64_t{1} << state.range(1));
  tbb::task_arena arena(static_cast<int>(state.range(2)));
  arena.execute([&] {
    for (auto _ : state) benchmark::DoNotOptimize(c.run().data_ptr());
  });
  state.counters["ns_per_element"] =
      benchmark::Counter(double(c.n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
// Sizes 2^12 ... 2^22 elements (the product: 2^15 ... 2^27 multiply-adds), one and two threads.
BENCHMARK(BM_Threads)
    ->ArgNames({"family", "log2n", "threads"})
    ->ArgsProduct({{kAdd, kExp, kTranspose, kTridiagonal}, {12, 13, 14, 15, 16, 17, 18, 20, 22}, {1, 2}})
    ->ArgsProduct({{kDot}, {15, 18, 21, 22, 24, 27}, {1, 2}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
