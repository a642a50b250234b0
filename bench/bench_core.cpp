// Foundation benchmarks, each against a baseline measured in the same run:
//  - one small recorded op (4-element tensors): forward, forward + record, + backward; baseline:
//    the same math as a hand-written C++ loop with a hand-written adjoint;
//  - a large elementwise op's bandwidth, and a transposing copy's, against memcpy of the same bytes;
//  - a 256 x 256 dot against a direct cblas_dgemm call;
//  - the transcendental ops (exp, log, tanh, sigmoid) over 2^16 elements against a loop calling
//    libm's function per element on the same values.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <tenax/tenax.h>

#include "hand_chain.h"

namespace {

using namespace tenax;

constexpr int kChain = 1000;  // ops per iteration in the small-op benchmarks

// y <- y * c + c, repeated: two recorded ops per step on 4-element tensors.
void BM_SmallOps_Forward(benchmark::State& state) {
  Tensor c = tensor({0.5, 0.25, 0.125, 1.0}, "i");
  for (auto _ : state) {
    Tensor y = c;
    for (int k = 0; k < kChain; ++k) y = y * c + c;
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(2.0 * kChain, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SmallOps_Forward)->Unit(benchmark::kMicrosecond);

// Records the chain on `tape` from the watched `c`; returns its end.
Tensor record_chain(Tape& tape, const Tensor& c0, Tensor& c) {
  c = tape.watch(c0);
  Tensor y = c;
  for (int k = 0; k < kChain; ++k) y = y * c + c;
  return y;
}

void BM_SmallOps_ForwardRecord(benchmark::State& state) {
  Tensor c0 = tensor({0.5, 0.25, 0.125, 1.0}, "i");
  for (auto _ : state) {
    Tape tape;
    Tensor c;
    Tensor y = record_chain(tape, c0, c);
    benchmark::DoNotOptimize(y.data_ptr());
    state.counters["tape_bytes_per_op"] = double(tape.bytes()) / (2.0 * kChain);
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(2.0 * kChain, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SmallOps_ForwardRecord)->Unit(benchmark::kMicrosecond);

void BM_SmallOps_ForwardRecordBackward(benchmark::State& state) {
  Tensor c0 = tensor({0.5, 0.25, 0.125, 1.0}, "i");
  for (auto _ : state) {
    Tape tape;
    Tensor c;
    Tensor y = record_chain(tape, c0, c);
    auto g = tape.gradient(sum(y), {c});
    benchmark::DoNotOptimize(g[0].data_ptr());
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(2.0 * kChain, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SmallOps_ForwardRecordBackward)->Unit(benchmark::kMicrosecond);

// Baseline: the same chain and its adjoint written by hand (values kept for the reverse pass).
void BM_SmallOps_HandWritten(benchmark::State& state) {
  std::vector<double> ys(4 * (kChain + 1));
  for (auto _ : state) bench::hand_chain(ys, kChain);
  state.counters["ns_per_op"] =
      benchmark::Counter(2.0 * kChain, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SmallOps_HandWritten)->Unit(benchmark::kMicrosecond);

// Large elementwise add (reads 2n, writes n doubles) vs memcpy (reads n, writes n), as bytes/s.
void BM_LargeAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = int(state.range(1));
  Tensor a = randn(Axes{{"i", n}}, 1), b = randn(Axes{{"i", n}}, 2);
  tbb::task_arena arena(threads);
  for (auto _ : state) {
    arena.execute([&] {
      Tensor c = a + b;
      benchmark::DoNotOptimize(c.data_ptr());
    });
  }
  state.SetBytesProcessed(state.iterations() * n * 24);
}
BENCHMARK(BM_LargeAdd)->Args({1 << 23, 1})->Args({1 << 23, 2})->Unit(benchmark::kMillisecond);

// Where a second thread pays: an elementwise op over n float64 elements on 1 or 2 oneTBB threads
// (op 0: a + b, memory-bound; op 1: exp(a), compute-bound), n from 2^12 to 2^20. The loops split
// into tasks of cpu::kParallelGrain elements or more (backends/cpu/loop.h).
void BM_ElementwiseThreads(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int op = int(state.range(1)), threads = int(state.range(2));
  Tensor a = randn(Axes{{"i", n}}, 1), b = randn(Axes{{"i", n}}, 2);
  tbb::task_arena arena(threads);
  for (auto _ : state) {
    arena.execute([&] {
      Tensor c = op == 0 ? a + b : exp(a);
      benchmark::DoNotOptimize(c.data_ptr());
    });
  }
  state.counters["ns_per_element"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ElementwiseThreads)
    ->ArgsProduct({{1 << 12, 1 << 14, 1 << 16, 1 << 17, 1 << 18, 1 << 20}, {0, 1}, {1, 2}})
    ->ArgNames({"n", "op", "threads"})
    ->Unit(benchmark::kMicrosecond);

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<double> src(static_cast<size_t>(n), 1.0);
  std::vector<double> dst(static_cast<size_t>(n));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), size_t(n) * sizeof(double));
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 16);
}
BENCHMARK(BM_Memcpy)->Arg(1 << 23)->Unit(benchmark::kMillisecond);

// contiguous(transpose(x)) of an n x n float64 matrix (n = 3200: 78 MiB each way), as bytes read +
// written per second, against BM_Memcpy above (the same bytes moved in order). Threads as for
// BM_LargeAdd.
void BM_TransposeCopy(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor x = randn(Axes{{"i", n}, {"j", n}}, 3);
  tbb::task_arena arena(int(state.range(1)));
  for (auto _ : state) {
    arena.execute([&] {
      Tensor t = contiguous(transpose(x, {"j", "i"}));
      benchmark::DoNotOptimize(t.data_ptr());
    });
  }
  state.SetBytesProcessed(state.iterations() * n * n * 16);
}
BENCHMARK(BM_TransposeCopy)->Args({3200, 1})->Args({3200, 2})->Unit(benchmark::kMillisecond);

// concat of two n x n/2 float64 matrices along the inner axis (n = 3200: 78 MiB in, 78 MiB out;
// every output row half from each input), as bytes read + written per second, against BM_Memcpy.
void BM_ConcatInner(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = randn(Axes{{"i", n}, {"j", n / 2}}, 4), b = randn(Axes{{"i", n}, {"j", n / 2}}, 5);
  tbb::task_arena arena(int(state.range(1)));
  for (auto _ : state) {
    arena.execute([&] {
      Tensor t = concat({a, b}, "j");
      benchmark::DoNotOptimize(t.data_ptr());
    });
  }
  state.SetBytesProcessed(state.iterations() * n * n * 16);
}
BENCHMARK(BM_ConcatInner)->Args({3200, 1})->Args({3200, 2})->Unit(benchmark::kMillisecond);

// dot of two 256 x 256 matrices on 1 or 2 oneTBB threads (Tenax runs BLAS single-threaded and
// splits large products itself).
void BM_Dot256(benchmark::State& state) {
  Tensor a = randn(Axes{{"i", 256}, {"k", 256}}, 1), b = randn(Axes{{"k", 256}, {"j", 256}}, 2);
  tbb::task_arena arena(int(state.range(0)));
  for (auto _ : state) {
    arena.execute([&] {
      Tensor c = dot(a, b, {"k"});
      benchmark::DoNotOptimize(c.data_ptr());
    });
  }
  state.SetItemsProcessed(state.iterations() * 2 * 256 * 256 * 256);
}
BENCHMARK(BM_Dot256)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// The baseline: one cblas_dgemm call with OpenBLAS's own threads (1 or 2), restored to one after.
void BM_Dgemm256(benchmark::State& state) {
  std::vector<double> a(256 * 256, 0.5), b(256 * 256, 0.25), c(256 * 256);
  openblas_set_num_threads(int(state.range(0)));
  for (auto _ : state) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 256, 256, 256, 1.0, a.data(), 256, b.data(), 256, 0.0,
                c.data(), 256);
    benchmark::DoNotOptimize(c.data());
  }
  openblas_set_num_threads(1);
  state.SetItemsProcessed(state.iterations() * 2 * 256 * 256 * 256);
}
BENCHMARK(BM_Dgemm256)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// The transcendental unary ops on 2^16 contiguous values (in cache), ns per element: Tenax's op
// (args: op 0 exp, 1 log, 2 tanh, 3 sigmoid; dtype 0 float64, 1 float32) and libm's function
// called per element on the same values (sigmoid as 1 / (1 + exp(-x))).
constexpr int64_t kMathN = 1 << 16;
Tensor math_input(int64_t op, DType dt) {
  const Tensor x = 3.0 * randn(Axes{{"i", kMathN}}, 8);
  return astype(op == 1 ? abs(x) + 1e-3 : x, dt);
}
Tensor math_op(int64_t op, const Tensor& x) {
  switch (op) {
    case 0: return exp(x);
    case 1: return log(x);
    case 2: return tanh(x);
    default: return sigmoid(x);
  }
}
template <class T>
void libm_loop(int64_t op, const T* x, T* y) {
  for (int64_t i = 0; i < kMathN; ++i) {
    const T v = x[i];
    y[i] = op == 0 ? std::exp(v) : op == 1 ? std::log(v) : op == 2 ? std::tanh(v) : T(1) / (T(1) + std::exp(-v));
  }
}
void per_element(benchmark::State& state) {
  state.counters["ns_per_element"] =
      benchmark::Counter(double(kMathN), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
void BM_Math_Tenax(benchmark::State& state) {
  const Tensor x = math_input(state.range(0), state.range(1) ? DType::f32 : DType::f64);
  for (auto _ : state) {
    Tensor y = math_op(state.range(0), x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  per_element(state);
}
void BM_Math_Libm(benchmark::State& state) {
  const Tensor x = math_input(state.range(0), state.range(1) ? DType::f32 : DType::f64);
  const Tensor y = zeros(x.axes(), x.dtype());
  for (auto _ : state) {
    if (state.range(1))
      libm_loop(state.range(0), static_cast<const float*>(x.data_ptr()), static_cast<float*>(y.data_ptr()));
    else
      libm_loop(state.range(0), static_cast<const double*>(x.data_ptr()), static_cast<double*>(y.data_ptr()));
    benchmark::DoNotOptimize(y.data_ptr());
  }
  per_element(state);
}
void math_args(benchmark::internal::Benchmark* b) {
  for (int64_t op = 0; op < 4; ++op)
    for (int64_t dt = 0; dt < 2; ++dt) b->Args({op, dt});
  b->ArgNames({"op", "f32"});
}
BENCHMARK(BM_Math_Tenax)->Apply(math_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Math_Libm)->Apply(math_args)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
