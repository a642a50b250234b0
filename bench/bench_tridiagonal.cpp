// The JAX #2491 case of issue 4: 100 000 tridiagonal systems of 100 unknowns, float64, in both
// layouts ("rows inner": each system contiguous; "batch inner": the system index contiguous).
// In one run: tridiagonal_solve in float64 and float32 (1, 2, 4, ... threads up to the machine's
// cores); a plain C++ Thomas loop per system (the Numba-equivalent baseline); LAPACK dgtsv per
// system; the Thomas algorithm written with tenax::scan; one matrix shared by every system (against
// LAPACK dgttrf + dgttrs on all right-hand sides at once); on a CUDA device when one is visible, the
// cuSPARSE path; the loss sum(w * x) and its value and gradient w.r.t. all four inputs (fresh
// adjoint buffers every iteration, as a user's loop gets them); the reverse pass alone (the
// pullback for a given cotangent) and with the solve; and the roofline: a STREAM triad's bandwidth
// (the same thread counts), and the solve's fraction of it measured in pairs (triad, then solve,
// per iteration); and the rows-inner operands merely read, in the sweep's order and in
// address order (what that layout costs the memory system). Every solve reports bytes_per_second
// counting the bytes the algorithm must move: 4 inputs read + x written = 40 bytes per unknown
// (20 in float32, 16 with one shared matrix); the solve and the gradient also report the
// allocator's peak beyond the inputs (peak_MiB).
#include <benchmark/benchmark.h>

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <tenax/tenax.h>

#include "tenax/backends/kernels.h"
#include "thomas_scan.h"

extern "C" {
void dgtsv_(const int* n, const int* nrhs, double* dl, double* d, double* du, double* b, const int* ldb,
            int* info);
void dgttrf_(const int* n, double* dl, double* d, double* du, double* du2, int* ipiv, int* info);
void dgttrs_(const char* trans, const int* n, const int* nrhs, const double* dl, const double* d,
             const double* du, const double* du2, const int* ipiv, double* b, const int* ldb, int* info,
             std::size_t trans_len);
}

namespace {

using namespace tenax;

constexpr int64_t kSystems = 100000;
constexpr int64_t kRows = 100;
constexpr int64_t kUnknowns = kSystems * kRows;
constexpr double kBytesPerUnknown = 40.0;

struct Problem {
  Tensor lower, diag, upper, rhs;
};

// Diagonally dominant systems; batch_inner picks the (i, sys) layout, else (sys, i).
const Problem& problem(bool batch_inner) {
  static Problem p[2];
  Problem& q = p[batch_inner ? 1 : 0];
  if (!q.rhs.defined()) {
    const Axes ax =
        batch_inner ? Axes{{"i", kRows}, {"sys", kSystems}} : Axes{{"sys", kSystems}, {"i", kRows}};
    q = {uniform(ax, 1, -1, 1), uniform(ax, 2, 2.5, 3.5), uniform(ax, 3, -1, 1), uniform(ax, 4, -1, 1)};
  }
  return q;
}

// Peak bytes the host allocator handed out while the benchmark ran (beyond the problem's inputs).
void reset_peak() { allocator_for(Device::cpu()).reset_stats(); }
void report_peak(benchmark::State& state, int64_t base) {
  state.counters["peak_MiB"] = double(allocator_stats().peak_bytes - base) / double(1 << 20);
}

void report(benchmark::State& state, double bytes_per_unknown = kBytesPerUnknown) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kUnknowns * bytes_per_unknown));
  state.counters["ns_per_unknown"] = benchmark::Counter(
      double(kUnknowns), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

int threads_of(const benchmark::State& state) { return static_cast<int>(state.range(1)); }

// 1, 2, 4, ... up to the cores oneTBB sees, and that count itself (1, 2 on a 2-core machine;
// 1 ... 16 on the 16-core GPU host): the scaling the issue asks for, measured where it runs.
std::vector<int64_t> thread_counts() {
  const int64_t cores = std::max<int64_t>(1, tbb::info::default_concurrency());
  std::vector<int64_t> counts;
  for (int64_t t = 1; t < cores; t *= 2) counts.push_back(t);
  counts.push_back(cores);
  return counts;
}

// ---- the roofline: STREAM triad a = b + s c over 3 x 80 MB, 24 bytes per element ----
struct Triad {
  std::vector<double> a, b, c;
  Triad() : a(size_t(kUnknowns), 0.0), b(size_t(kUnknowns), 1.0), c(size_t(kUnknowns), 2.0) {}
  void run() {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, kUnknowns, 1 << 16),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        for (int64_t k = r.begin(); k < r.end(); ++k)
                          a[size_t(k)] = b[size_t(k)] + 3.0 * c[size_t(k)];
                      });
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
};

void BM_Triad(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  Triad t;
  for (auto _ : state) t.run();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kUnknowns * 24);
}
BENCHMARK(BM_Triad)->ArgsProduct({{0}, thread_counts()})->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- Tenax ----
void BM_Tenax_Solve(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem(state.range(0) != 0);
  reset_peak();
  const int64_t base = allocator_stats().bytes_in_use;
  for (auto _ : state) {
    Tensor x = tridiagonal_solve(p.lower, p.diag, p.upper, p.rhs, "i");
    benchmark::DoNotOptimize(x.data_ptr());
  }
  report(state);
  report_peak(state, base);
}
BENCHMARK(BM_Tenax_Solve)
    ->ArgsProduct({{0, 1}, thread_counts()})
    ->ArgNames({"batch_inner", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The solve's fraction of the roofline measured in pairs: each iteration runs the triad, then the
// solve, so both see the same machine (a shared VM's neighbours slow both alike, where separate
// benchmarks may catch different stretches). Counters: the median and the quartiles over the
// iterations of (the solve's 40 bytes per unknown at the triad's bandwidth) / (the solve's time),
// in %. Between the two (untimed), 64 MB are read, so the triad's dirty lines are written back
// before the solve starts, not during it.
void BM_Tenax_SolveRoofline(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem(state.range(0) != 0);
  Triad t;
  std::vector<double> pct, clean(size_t{8} << 20, 1.0);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    t.run();
    const auto t1 = std::chrono::steady_clock::now();
    state.PauseTiming();
    benchmark::DoNotOptimize(std::accumulate(clean.begin(), clean.end(), 0.0));
    state.ResumeTiming();
    const auto t2 = std::chrono::steady_clock::now();
    Tensor x = tridiagonal_solve(p.lower, p.diag, p.upper, p.rhs, "i");
    benchmark::DoNotOptimize(x.data_ptr());
    const auto t3 = std::chrono::steady_clock::now();
    const double triad = std::chrono::duration<double>(t1 - t0).count();
    const double solve = std::chrono::duration<double>(t3 - t2).count();
    pct.push_back(100.0 * triad * (kBytesPerUnknown / 24.0) / solve);
  }
  std::sort(pct.begin(), pct.end());
  state.counters["roofline_pct_q1"] = pct[pct.size() / 4];
  state.counters["roofline_pct_median"] = pct[pct.size() / 2];
  state.counters["roofline_pct_q3"] = pct[pct.size() * 3 / 4];
}
BENCHMARK(BM_Tenax_SolveRoofline)
    ->ArgsProduct({{0, 1}, thread_counts()})
    ->ArgNames({"batch_inner", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same systems in float32 (converted once, outside the timing): 20 bytes per unknown to move.
const Problem& problem_f32(bool batch_inner) {
  static Problem p[2];
  Problem& q = p[batch_inner ? 1 : 0];
  if (!q.rhs.defined()) {
    const Problem& d = problem(batch_inner);
    q = {astype(d.lower, DType::f32), astype(d.diag, DType::f32), astype(d.upper, DType::f32),
         astype(d.rhs, DType::f32)};
  }
  return q;
}
void BM_Tenax_SolveF32(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem_f32(state.range(0) != 0);
  for (auto _ : state) {
    Tensor x = tridiagonal_solve(p.lower, p.diag, p.upper, p.rhs, "i");
    benchmark::DoNotOptimize(x.data_ptr());
  }
  report(state, kBytesPerUnknown / 2);
}
BENCHMARK(BM_Tenax_SolveF32)
    ->ArgsProduct({{0, 1}, thread_counts()})
    ->ArgNames({"batch_inner", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- one matrix shared by every system (lower, diag, upper along the rows only) ----
// The right-hand sides of the same problem, with the first system's matrix for all: the solve
// reads rhs and writes x, 16 bytes per unknown; Thomas, or pivoting (the LU's row swaps shared). Baseline:
// LAPACK's answer to one matrix and many right-hand sides, dgttrf once and dgttrs on all 100 000 columns at
// once (rows inner only: its right-hand sides are columns); dgttrs solves in place, so each iteration first
// copies rhs into x (the op's out-of-place contract; the copy moves 16 more bytes per unknown).
struct SharedMatrix {
  Tensor lower, diag, upper;
};
const SharedMatrix& shared_matrix() {
  static const SharedMatrix m = [] {
    const Problem& p = problem(false);
    return SharedMatrix{contiguous(select(p.lower, "sys", 0)), contiguous(select(p.diag, "sys", 0)),
                        contiguous(select(p.upper, "sys", 0))};
  }();
  return m;
}
void BM_Tenax_SolveShared(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem(state.range(0) != 0);
  const SharedMatrix& m = shared_matrix();
  const Tridiagonal alg = state.range(2) != 0 ? Tridiagonal::pivoting : Tridiagonal::thomas;
  for (auto _ : state) {
    Tensor x = tridiagonal_solve(m.lower, m.diag, m.upper, p.rhs, "i", alg);
    benchmark::DoNotOptimize(x.data_ptr());
  }
  report(state, 16.0);
}
BENCHMARK(BM_Tenax_SolveShared)
    ->ArgsProduct({{0, 1}, thread_counts(), {0, 1}})
    ->ArgNames({"batch_inner", "threads", "pivoting"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Value and gradient of sum(w * x) w.r.t. the shared matrix (summed over the systems) and rhs.
void BM_Tenax_GradientShared(benchmark::State& state) {
  const Problem& p = problem(state.range(0) != 0);
  const SharedMatrix& m = shared_matrix();
  const Tensor w = p.rhs;
  auto loss = [&](const std::vector<Tensor>& a) {
    return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
  };
  for (auto _ : state) {
    auto [v, g] = value_and_grad(loss, {m.lower, m.diag, m.upper, p.rhs});
    benchmark::DoNotOptimize(g[0].data_ptr());
  }
  report(state, 16.0);
}
BENCHMARK(BM_Tenax_GradientShared)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Lapack_SharedDgttrs(benchmark::State& state) {
  const Problem& p = problem(false);
  const SharedMatrix& m = shared_matrix();
  const int n = static_cast<int>(kRows), nrhs = static_cast<int>(kSystems);
  const double *a = m.lower.data<double>(), *b = m.diag.data<double>(), *c = m.upper.data<double>();
  std::vector<double> dl(a + 1, a + n), d(b, b + n), du(c, c + n - 1);
  std::vector<double> du2(static_cast<size_t>(n)), x(static_cast<size_t>(kUnknowns));
  std::vector<int> ipiv(static_cast<size_t>(n));
  int info = 0;
  dgttrf_(&n, dl.data(), d.data(), du.data(), du2.data(), ipiv.data(), &info);
  const double* r = p.rhs.data<double>();
  const char trans = 'N';
  for (auto _ : state) {
    std::copy(r, r + kUnknowns, x.data());
    dgttrs_(&trans, &n, &nrhs, dl.data(), d.data(), du.data(), du2.data(), ipiv.data(), x.data(), &n, &info,
            1);
    benchmark::DoNotOptimize(x.data());
  }
  if (info != 0) state.SkipWithError("dgttrf/dgttrs failed");
  report(state, 16.0);
}
BENCHMARK(BM_Lapack_SharedDgttrs)->Unit(benchmark::kMillisecond)->UseRealTime();

// The loss sum(w * x) alone (no tape): the baseline of the gradient's cost.
void BM_Tenax_Loss(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem(state.range(0) != 0);
  for (auto _ : state) {
    Tensor v = sum(p.rhs * tridiagonal_solve(p.lower, p.diag, p.upper, p.rhs, "i"));
    benchmark::DoNotOptimize(v.data_ptr());
  }
  report(state);
}
BENCHMARK(BM_Tenax_Loss)
    ->ArgsProduct({{0, 1}, thread_counts()})
    ->ArgNames({"batch_inner", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Value and gradient of sum(w * x) w.r.t. lower, diag, upper and rhs.
void BM_Tenax_Gradient(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem(state.range(0) != 0);
  const Tensor w = p.rhs;
  auto loss = [&](const std::vector<Tensor>& a) {
    return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
  };
  reset_peak();
  const int64_t base = allocator_stats().bytes_in_use;
  for (auto _ : state) {
    auto [v, g] = value_and_grad(loss, {p.lower, p.diag, p.upper, p.rhs});
    benchmark::DoNotOptimize(g[0].data_ptr());
  }
  report(state);
  report_peak(state, base);
}
BENCHMARK(BM_Tenax_Gradient)
    ->ArgsProduct({{0, 1}, thread_counts()})
    ->ArgNames({"batch_inner", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The reverse pass alone: the gradient w.r.t. all four inputs of the solve for a given cotangent
// (the pullback of one vjp, called again each iteration: the transposed solve and the four
// adjoints), and the solve with its pullback (vjp + pullback: the value and the gradient of
// <w, x>, without the loss's own ops).
void BM_Tenax_Pullback(benchmark::State& state) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads_of(state));
  const Problem& p = problem(state.range(0) != 0);
  const bool with_solve = state.range(2) != 0;
  const Tensor w = p.rhs;
  auto solve = [](const std::vector<Tensor>& a) { return tridiagonal_solve(a[0], a[1], a[2], a[3], "i"); };
  const std::vector<Tensor> args{p.lower, p.diag, p.upper, p.rhs};
  VjpResult once = vjp(solve, args);
  benchmark::DoNotOptimize(once.pullback(w)[0].data_ptr());  // the adjoints' first page faults
  for (auto _ : state) {
    if (with_solve) {
      VjpResult r = vjp(solve, args);
      std::vector<Tensor> g = r.pullback(w);
      benchmark::DoNotOptimize(g[0].data_ptr());
    } else {
      std::vector<Tensor> g = once.pullback(w);
      benchmark::DoNotOptimize(g[0].data_ptr());
    }
  }
  report(state);
}
BENCHMARK(BM_Tenax_Pullback)
    ->ArgsProduct({{0, 1}, {1}, {0, 1}})
    ->ArgNames({"batch_inner", "threads", "with_solve"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The Thomas algorithm as two tenax::scan loops over the rows, vectorised over the systems.
void BM_Tenax_ScanThomas(benchmark::State& state) {
  const Problem& p = problem(state.range(0) != 0);
  for (auto _ : state) {
    Tensor x = testing::thomas_by_scan(p.lower, p.diag, p.upper, p.rhs, "i");
    benchmark::DoNotOptimize(x.data_ptr());
  }
  report(state);
}
BENCHMARK(BM_Tenax_ScanThomas)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The (sys, i) layout made dense first (contiguous(transpose(...)) of the four operands), then the
// same scans: what a user did by hand before scans staged strided slices.
void BM_Tenax_ScanThomasTransposedFirst(benchmark::State& state) {
  const Problem& p = problem(false);
  const AxisList rows_outer{"i", "sys"};
  for (auto _ : state) {
    Tensor x = testing::thomas_by_scan(contiguous(transpose(p.lower, rows_outer)), contiguous(transpose(p.diag, rows_outer)),
                                       contiguous(transpose(p.upper, rows_outer)), contiguous(transpose(p.rhs, rows_outer)), "i");
    benchmark::DoNotOptimize(x.data_ptr());
  }
  report(state);
}
BENCHMARK(BM_Tenax_ScanThomasTransposedFirst)->Unit(benchmark::kMillisecond)->UseRealTime();

// The Thomas scans' value and gradient with respect to all four operands through a tape, in
// either layout (rows inner: each step's slices staged through SliceStage).
void BM_Tenax_ScanThomasGradient(benchmark::State& state) {
  const Problem& p = problem(state.range(0) != 0);
  for (auto _ : state) {
    Tape tape;
    std::vector<Tensor> w{tape.watch(p.lower), tape.watch(p.diag), tape.watch(p.upper), tape.watch(p.rhs)};
    Tensor x = testing::thomas_by_scan(w[0], w[1], w[2], w[3], "i");
    std::vector<Tensor> g = tape.gradient(sum(x), w);
    benchmark::DoNotOptimize(g[3].data_ptr());
  }
  report(state);
}
BENCHMARK(BM_Tenax_ScanThomasGradient)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same solve on CUDA device 0 (cuSPARSE gtsv2StridedBatch for rows inner, gtsvInterleavedBatch
// for batch inner), inputs moved to the device once; each iteration ends when the solve is done.
void BM_Cuda_Solve(benchmark::State& state) {
  if (detail::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device visible");
    return;
  }
  const Device gpu = Device::cuda(0);
  const Problem& p = problem(state.range(0) != 0);
  const Tensor l = to(p.lower, gpu), d = to(p.diag, gpu), u = to(p.upper, gpu), r = to(p.rhs, gpu);
  for (auto _ : state) {
    Tensor x = tridiagonal_solve(l, d, u, r, "i");
    benchmark::DoNotOptimize(x.data_ptr());
  }
  report(state);
}
BENCHMARK(BM_Cuda_Solve)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Value and gradient w.r.t. all four operands on CUDA device 0 (the adjoint solve goes through
// the same cuSPARSE dispatch); each iteration ends when the gradients are done (the value is read
// back after them on the same stream).
void BM_Cuda_Gradient(benchmark::State& state) {
  if (detail::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device visible");
    return;
  }
  const Device gpu = Device::cuda(0);
  const Problem& p = problem(state.range(0) != 0);
  const Tensor w = to(p.rhs, gpu);
  auto loss = [&](const std::vector<Tensor>& a) {
    return sum(w * tridiagonal_solve(a[0], a[1], a[2], a[3], "i"));
  };
  const std::vector<Tensor> args{to(p.lower, gpu), to(p.diag, gpu), to(p.upper, gpu), to(p.rhs, gpu)};
  for (auto _ : state) {
    auto [v, g] = value_and_grad(loss, args);
    benchmark::DoNotOptimize(to(v, Device::cpu()).item());
  }
  report(state);
}
BENCHMARK(BM_Cuda_Gradient)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- baselines on raw arrays ----

// Plain Thomas per system, one system after another (what a Numba loop compiles to).
void BM_Loop_Thomas(benchmark::State& state) {
  const bool batch_inner = state.range(0) != 0;
  const Problem& p = problem(batch_inner);
  const double *a = p.lower.data<double>(), *b = p.diag.data<double>(), *c = p.upper.data<double>(),
               *r = p.rhs.data<double>();
  std::vector<double> x(static_cast<size_t>(kUnknowns)), cp(static_cast<size_t>(kRows)),
      dp(static_cast<size_t>(kRows));
  const int64_t row = batch_inner ? kSystems : 1, sys = batch_inner ? 1 : kRows;
  for (auto _ : state) {
    for (int64_t s = 0; s < kSystems; ++s) {
      const int64_t o = s * sys;
      cp[0] = c[o] / b[o];
      dp[0] = r[o] / b[o];
      for (int64_t i = 1; i < kRows; ++i) {
        const int64_t k = o + i * row;
        const double m = 1.0 / (b[k] - a[k] * cp[size_t(i - 1)]);
        cp[size_t(i)] = c[k] * m;
        dp[size_t(i)] = (r[k] - a[k] * dp[size_t(i - 1)]) * m;
      }
      double xi = dp[size_t(kRows - 1)];
      x[size_t(o + (kRows - 1) * row)] = xi;
      for (int64_t i = kRows - 2; i >= 0; --i) {
        xi = dp[size_t(i)] - cp[size_t(i)] * xi;
        x[size_t(o + i * row)] = xi;
      }
    }
    benchmark::DoNotOptimize(x.data());
  }
  report(state);
}
BENCHMARK(BM_Loop_Thomas)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// LAPACK dgtsv per system on contiguous copies (it overwrites its inputs).
void BM_Lapack_Dgtsv(benchmark::State& state) {
  const bool batch_inner = state.range(0) != 0;
  const Problem& p = problem(batch_inner);
  const double *a = p.lower.data<double>(), *b = p.diag.data<double>(), *c = p.upper.data<double>(),
               *r = p.rhs.data<double>();
  std::vector<double> x(static_cast<size_t>(kUnknowns)), dl(static_cast<size_t>(kRows)),
      d(static_cast<size_t>(kRows)), du(static_cast<size_t>(kRows)), rb(static_cast<size_t>(kRows));
  const int64_t row = batch_inner ? kSystems : 1, sys = batch_inner ? 1 : kRows;
  const int n = static_cast<int>(kRows), one = 1;
  for (auto _ : state) {
    for (int64_t s = 0; s < kSystems; ++s) {
      const int64_t o = s * sys;
      for (int64_t i = 0; i < kRows; ++i) {
        const int64_t k = o + i * row;
        d[size_t(i)] = b[k];
        rb[size_t(i)] = r[k];
        if (i + 1 < kRows) {
          dl[size_t(i)] = a[k + row];
          du[size_t(i)] = c[k];
        }
      }
      int info = 0;
      dgtsv_(&n, &one, dl.data(), d.data(), du.data(), rb.data(), &n, &info);
      for (int64_t i = 0; i < kRows; ++i) x[size_t(o + i * row)] = rb[size_t(i)];
    }
    benchmark::DoNotOptimize(x.data());
  }
  report(state);
}
BENCHMARK(BM_Lapack_Dgtsv)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("batch_inner")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// What the rows-inner layout costs the memory system without the solve's arithmetic: the four
// operands of the rows-inner problem read (and summed) panel by panel, 64 systems at a time,
// either in the order the sweep reads them (blocks of 4 rows of each system in turn, each
// system's lines prefetched two ahead: what solve_rows did before it fetched the next panel's
// operands in address order) or in address order (each operand's 64 systems as one run).
void BM_RowsReadOrder(benchmark::State& state) {
  using V = xsimd::batch<double>;
  constexpr int64_t kPanel = 64, kBlock = 4, kAhead = 16;
  const bool address_order = state.range(0) != 0;
  const Problem& p = problem(false);
  const double* op[4] = {p.lower.data<double>(), p.diag.data<double>(), p.upper.data<double>(),
                         p.rhs.data<double>()};
  for (auto _ : state) {
    V acc[4] = {V(0.0), V(0.0), V(0.0), V(0.0)};  // one per operand: four add chains, not one
    for (int64_t s0 = 0; s0 < kSystems; s0 += kPanel) {
      if (address_order) {
        for (int o = 0; o < 4; ++o)
          for (int64_t i = s0 * kRows; i < (s0 + kPanel) * kRows; i += 4 * V::size)
            for (int64_t j = 0; j < 4; ++j) acc[j] += V::load_unaligned(op[o] + i + j * V::size);
        continue;
      }
      for (int64_t r0 = 0; r0 < kRows; r0 += kBlock)
        for (int64_t s = s0; s < s0 + kPanel; ++s)
          for (int o = 0; o < 4; ++o) {
            const double* row = op[o] + s * kRows + r0;
            if (r0 % 8 == 0 && r0 + kAhead < kRows) __builtin_prefetch(row + kAhead);
            for (int64_t j = 0; j < kBlock; j += V::size) acc[o] += V::load_unaligned(row + j);
          }
    }
    benchmark::DoNotOptimize(xsimd::hadd(acc[0] + acc[1] + acc[2] + acc[3]));
  }
  // The bytes read, per unknown: 4 operands x 8 bytes.
  report(state, 32.0);
}
BENCHMARK(BM_RowsReadOrder)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("address_order")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
