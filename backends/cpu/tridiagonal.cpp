// CPU tridiagonal solves. Thomas: the systems go through in blocks of one SIMD register's width
// (xsimd), lane w of every vector belonging to system first + w, so the divisions of W systems
// issue together instead of one system's latency chain. Three ways in, chosen per panel:
// - systems adjacent in memory (the batch axis innermost): each row of an operand is loaded
//   straight into vectors, the rows a few ahead prefetched (sweep);
// - each system's rows contiguous (the row axis innermost): blocks of VS rows are transposed in
//   registers, VS systems at a time, while the next panel's operands are prefetched in address
//   order (solve_rows);
// - anything else: operands copied row-interleaved into small tiles that stay in L1/L2.
// From memory, systems lying back to back take the AVX2 build's chunked solve instead:
// lane k walks the k-th quarter of a task's systems, so each operand is read as 4 long runs in
// address order (tridiagonal_chunks.h).
// One matrix shared by every system (lower, diag and upper without a batch axis) is factored once
// per call instead, each system then reading only its right-hand side (tridiagonal_shared.h).
// Pivoting: LAPACK gtsv per system on contiguous copies; a shared matrix through LAPACK gttrf once
// and its LU applied by the shared kernel (PivotingShared). Blocks of systems run in parallel on
// oneTBB. The Thomas panels live in tridiagonal_thomas.h (their loop over a range of systems in
// tridiagonal_range.h), built for the baseline here and for
// AVX2 + FMA in tridiagonal_avx2.cpp (rows-inner solves go there where the CPU has it);
// this file holds the pivoting variant and the dispatch.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "tenax/backends/cpu/avx2.h"
#include "tenax/backends/cpu/register.h"
#include "tenax/backends/cpu/tridiagonal_range.h"
#include "tenax/backends/cpu/tridiagonal_shared.h"
#include "tenax/core/env.h"
#include "tenax/core/threads.h"

extern "C" {
void dgtsv_(const int* n, const int* nrhs, double* dl, double* d, double* du, double* b, const int* ldb,
            int* info);
void sgtsv_(const int* n, const int* nrhs, float* dl, float* d, float* du, float* b, const int* ldb,
            int* info);
void dgttrf_(const int* n, double* dl, double* d, double* du, double* du2, int* ipiv, int* info);
void sgttrf_(const int* n, float* dl, float* d, float* du, float* du2, int* ipiv, int* info);
void dgttrs_(const char* trans, const int* n, const int* nrhs, const double* dl, const double* d,
             const double* du, const double* du2, const int* ipiv, double* b, const int* ldb, int* info,
             std::size_t trans_len);
void sgttrs_(const char* trans, const int* n, const int* nrhs, const float* dl, const float* d,
             const float* du, const float* du2, const int* ipiv, float* b, const int* ldb, int* info,
             std::size_t trans_len);
}

namespace tenax::cpu {
namespace {

// ---- partial pivoting: LAPACK gtsv on a contiguous copy of each system ----

template <class T>
void gtsv(int n, T* dl, T* d, T* du, T* b, int* info) {
  const int nrhs = 1;
  if constexpr (sizeof(T) == 8)
    dgtsv_(&n, &nrhs, dl, d, du, b, &n, info);
  else
    sgtsv_(&n, &nrhs, dl, d, du, b, &n, info);
}

template <class T>
int64_t pivoting_range(const TridiagonalArgs& a, int64_t begin, int64_t end) {
  const int64_t n = a.n;
  std::vector<T> buf(static_cast<size_t>(4 * n));
  T *dl = buf.data(), *d = dl + n, *du = d + n, *b = du + n;
  auto at = [&](int o, int64_t s, int64_t i) { return in_ptr<T>(a, o)[a.off[o][s] + i * a.step[o]]; };
  for (int64_t s = begin; s < end; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      d[i] = at(Op::diag, s, i);
      b[i] = at(Op::rhs, s, i);
    }
    // gtsv's DL holds A(i+1, i), its DU holds A(i, i+1), i = 0 .. n-2.
    for (int64_t i = 0; i + 1 < n; ++i) {
      dl[i] = a.transpose ? at(Op::upper, s, i) : at(Op::lower, s, i + 1);
      du[i] = a.transpose ? at(Op::lower, s, i + 1) : at(Op::upper, s, i);
    }
    int info = 0;
    gtsv<T>(static_cast<int>(n), dl, d, du, b, &info);
    bool finite = info == 0;
    for (int64_t i = 0; finite && i < n; ++i) finite = std::isfinite(d[i]);  // U's diagonal
    if (!finite) return s;
    T* x = static_cast<T*>(a.out) + a.off[Op::x][s];
    for (int64_t i = 0; i < n; ++i) x[i * a.step[Op::x]] = b[i];
  }
  return -1;
}

// One matrix for every system (no batch axis on lower, diag, upper), pivoting: LAPACK gttrf once.
// Then, where the right-hand sides lie in a layout SharedSolve takes, its vectorised solve with
// the LU's factors (packed: L's row swaps are the same for every system, so its lanes stay in
// step); otherwise gttrs on the right-hand sides of kColumns systems at a time, gathered as the
// columns of a contiguous block and scattered back to x. The bands, A^T's where a.transpose.
template <class T>
struct PivotingShared {
  static constexpr int kColumns = 64;
  int n = 0;
  std::vector<T> dl, d, du, du2;
  std::vector<int> ipiv;

  // False where LAPACK finds the matrix singular or U's diagonal is not finite.
  bool factor(const TridiagonalArgs& a) {
    n = static_cast<int>(a.n);
    const auto un = static_cast<size_t>(n);
    dl.assign(un, T(0));
    d.assign(un, T(0));
    du.assign(un, T(0));
    du2.assign(un, T(0));
    ipiv.assign(un, 0);
    auto at = [&a](int o, int64_t i) { return shared_at<T>(a, o, i); };
    for (int64_t i = 0; i < n; ++i) {
      d[size_t(i)] = at(Op::diag, i);
      if (i + 1 < n) {  // gttrf's DL holds A(i+1, i), its DU holds A(i, i+1)
        dl[size_t(i)] = a.transpose ? at(Op::upper, i) : at(Op::lower, i + 1);
        du[size_t(i)] = a.transpose ? at(Op::lower, i + 1) : at(Op::upper, i);
      }
    }
    int info = 0;
    if constexpr (sizeof(T) == 8)
      dgttrf_(&n, dl.data(), d.data(), du.data(), du2.data(), ipiv.data(), &info);
    else
      sgttrf_(&n, dl.data(), d.data(), du.data(), du2.data(), ipiv.data(), &info);
    return info == 0 && std::all_of(d.begin(), d.end(), [](T v) { return std::isfinite(v); });
  }

  // The factors as SharedSolve reads them (5n values: L's multipliers, the swaps, 1 / U_ii, U's
  // two superdiagonals; zero past the matrix).
  std::vector<T> packed() const {
    const auto un = static_cast<size_t>(n);
    std::vector<T> f(5 * un, T(0));
    for (size_t i = 0; i < un; ++i) {
      if (i + 1 < un) {
        f[i] = dl[i];
        f[un + i] = ipiv[i] == static_cast<int>(i) + 2 ? T(1) : T(0);  // LAPACK's 1-based row i + 2
        f[3 * un + i] = du[i];
      }
      f[2 * un + i] = T(1) / d[i];
      if (i + 2 < un) f[4 * un + i] = du2[i];
    }
    return f;
  }

  // Systems [begin, end) through gttrs.
  void solve(const TridiagonalArgs& a, int64_t begin, int64_t end) const {
    std::vector<T> b(static_cast<size_t>(n) * kColumns);
    const T* rhs = in_ptr<T>(a, Op::rhs);
    T* x = static_cast<T*>(a.out);
    const int64_t rs = a.step[Op::rhs], xs = a.step[Op::x];
    for (int64_t s = begin; s < end; s += kColumns) {
      const int cols = static_cast<int>(std::min<int64_t>(kColumns, end - s));
      for (int c = 0; c < cols; ++c) {
        const T* r = rhs + a.off[Op::rhs][s + c];
        T* col = b.data() + int64_t{c} * n;
        for (int64_t i = 0; i < n; ++i) col[i] = r[i * rs];
      }
      const char trans = 'N';
      int info = 0;
      if constexpr (sizeof(T) == 8)
        dgttrs_(&trans, &n, &cols, dl.data(), d.data(), du.data(), du2.data(), ipiv.data(), b.data(), &n,
                &info, 1);
      else
        sgttrs_(&trans, &n, &cols, dl.data(), d.data(), du.data(), du2.data(), ipiv.data(), b.data(), &n,
                &info, 1);
      for (int c = 0; c < cols; ++c) {
        T* out = x + a.off[Op::x][s + c];
        const T* col = b.data() + int64_t{c} * n;
        for (int64_t i = 0; i < n; ++i) out[i * xs] = col[i];
      }
    }
  }
};

// ---- dispatch over blocks of systems ----

// Each system's rows contiguous and consecutive systems not adjacent, for every operand that
// varies by system.
bool rows_inner(const TridiagonalArgs& a) {
  if (a.systems < 2) return false;
  for (int o = 0; o < Op::count; ++o) {
    if (o == Op::x && !a.out) continue;
    const int64_t d = a.off[o][1] - a.off[o][0];
    if (d == 0 && o != Op::x) continue;
    if (a.step[o] != 1 || d == 1) return false;
  }
  return true;
}

// The last-level cache's size in bytes: the highest cache level sysfs lists for cpu0 (what one
// core shares: 32 MiB on the Zen 3 VM, where sysconf says 256 MiB, the whole socket's); 32 MiB
// where sysfs has none.
int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t best = int64_t{32} << 20;
    int best_level = 0;
    for (int i = 0; i < 8; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size");
      int level = 0;
      std::string size;
      if (!(level_file >> level) || !(size_file >> size) || size.empty() || level <= best_level) continue;
      int64_t value = 0;
      try {
        value = std::stoll(size);
      } catch (const std::exception&) {
        continue;
      }
      const char unit = size.back();
      value <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
      if (value > 0) {
        best = value;
        best_level = level;
      }
    }
    return best;
  }();
  return bytes;
}

// Whether rows-inner panels prefetch the next panel's operands (tridiagonal_fetch.h):
// where the call's arrays are more than half the last-level cache. From the caches the solve is
// faster without, from memory much faster with; half, not all of the cache, because a shared LLC
// does not hold a whole call's arrays (docs/archive/tuning.md, "Fetching the next panel: when").
// TENAX_TRIDIAGONAL_FETCH=1 / 0 forces it on / off (the tests run it on at small sizes).
bool fetch_next_panels(const TridiagonalArgs& a, int64_t elem_bytes) {
  static const std::optional<bool> forced = detail::env_flag("TENAX_TRIDIAGONAL_FETCH");
  if (forced) return *forced;
  return 2 * Op::count * a.systems * a.n * elem_bytes > last_level_cache_bytes();
}

// Systems per task: whole panels with at least ~32k unknowns each are worth a task.
template <class T>
int64_t panel_task(const TridiagonalArgs& a) {
  const int64_t W = panel_width<T>(a);
  return std::max<int64_t>(W, ((int64_t{1} << 15) / a.n + W - 1) / W * W);
}

// Runs range(begin, end) over blocks of per_task systems in parallel (several blocks in one call
// where oneTBB hands a thread several); the first failed system or -1.
template <class T, class Range>
int64_t solve_in_blocks(const TridiagonalArgs& a, Range range, int64_t per_task) {
  if (a.systems <= per_task) return range(0, a.systems);
  std::atomic<int64_t> first_failure{std::numeric_limits<int64_t>::max()};
  const int64_t tasks = (a.systems + per_task - 1) / per_task;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, tasks, 1), [&](const tbb::blocked_range<int64_t>& r) {
    // The task's blocks in one call: one thread's systems in a row, so each panel can fetch the
    // next one's operands (rows inner) across block boundaries too.
    const int64_t f = range(r.begin() * per_task, std::min(a.systems, r.end() * per_task));
    int64_t cur = first_failure.load();
    while (f >= 0 && f < cur && !first_failure.compare_exchange_weak(cur, f)) {
    }
  });
  const int64_t f = first_failure.load();
  return f == std::numeric_limits<int64_t>::max() ? -1 : f;
}
template <class T, class Range>
int64_t solve_in_blocks(const TridiagonalArgs& a, Range range) {
  return solve_in_blocks<T>(a, range, panel_task<T>(a));
}

// Whether every system of `a` has the same matrix: lower, diag and upper without a batch axis.
bool shared_matrix(const TridiagonalArgs& a) {
  for (int o = Op::lower; o <= Op::upper; ++o)
    if (a.off[o].table || a.off[o].stride != 0) return false;
  return true;
}

// Systems [begin, end) of a shared-matrix solve (tridiagonal_shared.h), in the AVX2 build where
// the CPU has it.
template <class T>
void shared_range_any(const TridiagonalArgs& a, const T* factor, int64_t begin, int64_t end, T* sums) {
#if defined(TENAX_HAVE_AVX2_KERNELS)
  if (cpu_avx2()) {
    if constexpr (std::is_same_v<T, double>)
      shared_range_avx2(a, factor, begin, end, sums);
    else
      shared_range_avx2_f32(a, factor, begin, end, sums);
    return;
  }
#endif
  shared_range<T>(a, factor, begin, end, sums);
}

// The fused reverse rule of a shared matrix: λ system by system (rhs's adjoint), and the matrix's
// adjoints summed over the systems. The sums go per fixed chunk of systems, added in chunk order,
// so the result does not depend on how the threads split the work; then they are written (or
// added) into the adjoints, negated: lower̄_i = -Σ λ_i x_{i-1}, diaḡ_i = -Σ λ_i x_i,
// upper̄_i = -Σ λ_i x_{i+1} (lower̄_0 and upper̄_{n-1} zero when written, untouched when added).
template <class T>
void shared_vjp(const TridiagonalArgs& a, const T* f) {
  using S = TridiagonalArgs::Adjoints;
  const S& j = *a.vjp;
  const int64_t n = a.n;
  bool summed = false;
  for (int k = S::adj_lower; k <= S::adj_upper; ++k) summed = summed || j.adj[k - 1];
  const int64_t per = std::max<int64_t>(64, ((int64_t{1} << 15) / n + 63) / 64 * 64);
  const int64_t chunks = (a.systems + per - 1) / per;
  std::vector<T> partial(summed ? static_cast<size_t>(chunks * 3 * n) : 0, T(0));
  auto chunk = [&](int64_t c) {
    shared_range_any<T>(a, f, c * per, std::min(a.systems, (c + 1) * per),
                        summed ? partial.data() + c * 3 * n : nullptr);
  };
  if (chunks == 1)
    chunk(0);
  else
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, chunks, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          for (int64_t c = r.begin(); c < r.end(); ++c) chunk(c);
        },
        tbb::simple_partitioner());
  if (!summed) return;
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t q = 0; q < 3 * n; ++q)
      partial[static_cast<size_t>(q)] += partial[static_cast<size_t>(c * 3 * n + q)];
  for (int k = S::adj_lower; k <= S::adj_upper; ++k) {
    T* dst = static_cast<T*>(j.adj[k - 1]);
    if (!dst) continue;
    dst += j.off[k][0];
    const int64_t step = j.step[k];
    const T* sum = partial.data() + (k - S::adj_lower) * n;
    const bool assign = j.assign[k - 1];
    // lower̄ from row 1, upper̄ up to row n - 2; the entry outside the matrix zero when written.
    const int64_t lo = k == S::adj_lower ? 1 : 0, hi = k == S::adj_upper ? n - 1 : n;
    if (assign && lo == 1) dst[0] = T(0);
    if (assign && hi == n - 1) dst[(n - 1) * step] = T(0);
    if (hi > lo)
      write_or_add(dst + lo * step, hi - lo, step, assign, [&](int64_t i) { return -sum[lo + i]; });
  }
}

// One matrix for all systems (tridiagonal_shared.h): factored once, then the systems in
// parallel: the solve where the right-hand sides lie in a layout SharedSolve takes, the fused
// reverse rule in any layout (the op sends it here with the matrix's adjoints summed over the
// systems: TridiagonalArgs::Adjoints), the pivoting solve in any layout (PivotingShared). -1, or
// 0 where a pivot fails (every system does); nullopt: not such a call.
template <class T>
std::optional<int64_t> solve_shared(const TridiagonalArgs& a) {
  if (!shared_matrix(a)) return std::nullopt;
  const bool layout = SharedSolve<T>::layout_of(a) != SharedSolve<T>::Layout::none;
  std::vector<T> factor;
  if (a.pivoting) {  // the op fuses no pivoting reverse rule: a.vjp is null
    PivotingShared<T> p;
    if (!p.factor(a)) return 0;
    if (!layout)
      return solve_in_blocks<T>(a, [&a, &p](int64_t begin, int64_t end) {
        p.solve(a, begin, end);
        return int64_t{-1};
      });
    factor = p.packed();
  } else {
    if (!a.vjp && !layout) return std::nullopt;
    factor.resize(static_cast<size_t>(3 * a.n));
    if (!factor_shared<T>(a, factor.data())) return 0;
    if (a.vjp) {
      shared_vjp<T>(a, factor.data());
      return -1;
    }
  }
  const T* f = factor.data();
  return solve_in_blocks<T>(a, [&a, f](int64_t begin, int64_t end) {
    shared_range_any<T>(a, f, begin, end, nullptr);
    return int64_t{-1};
  });
}

template <class T>
int64_t tridiagonal(const TridiagonalArgs& a) {
  if (a.systems <= 0 || a.n <= 0) return -1;
  if (const std::optional<int64_t> shared = solve_shared<T>(a)) return *shared;
#if defined(TENAX_HAVE_AVX2_KERNELS)
  // Solves whose systems' rows are contiguous go to the AVX2 build (4 x 4 float64 or 8 x 8 float32
  // register transposes; measured in bench/RESULTS.md); the other layouts measured no faster
  // with AVX2.
  if (!a.pivoting && cpu_avx2() && rows_inner(a)) {
    const bool fetch = fetch_next_panels(a, sizeof(T));
    // From memory, systems back to back: lanes walking far-apart chunks
    // (tridiagonal_chunks.h) instead of panels fetching the next. TENAX_TRIDIAGONAL_CHUNKS=0
    // keeps the panels.
    static const bool chunks = detail::env_switch("TENAX_TRIDIAGONAL_CHUNKS");
    if (fetch && chunks && chunkable_avx2(a)) {
      // Tasks of ~2^18 unknowns (2 MB per operand; at 100 000 x 100 on the Zen 3, 1 thread: tasks
      // of 2 048 - 8 192 systems 80-92% of the roofline, oneTBB's pieces of 336 - 1 680 71-78%),
      // at least four per thread.
      const int64_t threads = std::min(tbb::this_task_arena::max_concurrency(), num_threads());
      const int64_t per_task = std::max<int64_t>(
          64, std::min<int64_t>((int64_t{1} << 18) / a.n, (a.systems + 4 * threads - 1) / (4 * threads)));
      return solve_in_blocks<T>(
          a,
          [&a](int64_t begin, int64_t end) {
            if constexpr (std::is_same_v<T, double>)
              return chunked_range_avx2(a, begin, end);
            else
              return chunked_range_avx2_f32(a, begin, end);
          },
          per_task);
    }
    return solve_in_blocks<T>(a, [&a, fetch](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, double>)
        return thomas_range_avx2(a, begin, end, fetch);
      else
        return thomas_range_avx2_f32(a, begin, end, fetch);
    });
  }
#endif
  const bool fetch = rows_inner(a) && fetch_next_panels(a, sizeof(T));
  return solve_in_blocks<T>(a, [&a, fetch](int64_t begin, int64_t end) {
    return a.pivoting ? pivoting_range<T>(a, begin, end) : thomas_range<T>(a, begin, end, fetch);
  });
}

}  // namespace

void register_tridiagonal(detail::KernelTable& t) {
  t.tridiagonal[0] = tridiagonal<double>;
  t.tridiagonal[1] = tridiagonal<float>;
}

}  // namespace tenax::cpu
