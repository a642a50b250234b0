// CPU tridiagonal solves. Thomas: the systems go through in blocks of one SIMD register's width
// (xsimd), lane w of every vector belonging to system first + w, so the divisions of W systems
// issue together instead of one system's latency chain. An operand whose block of systems is
// contiguous in memory (the batch axis is the innermost one) is loaded straight into vectors;
// one whose systems lie apart (the row axis is the innermost one) is first copied row-interleaved
// into a small tile that stays in L1. Pivoting: LAPACK gtsv per system on contiguous copies.
// Blocks of systems run in parallel on oneTBB.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <xsimd/xsimd.hpp>

#include "tenax/backends/cpu/register.h"

extern "C" {
void dgtsv_(const int* n, const int* nrhs, double* dl, double* d, double* du, double* b, const int* ldb, int* info);
void sgtsv_(const int* n, const int* nrhs, float* dl, float* d, float* du, float* b, const int* ldb, int* info);
}

namespace tenax::cpu {
namespace {

using detail::TridiagonalArgs;
using Op = TridiagonalArgs::Operand;

template <class T>
const T* in_ptr(const TridiagonalArgs& a, int o) {
  return static_cast<const T*>(a.in[o]);
}

// ---- Thomas, W systems at a time ----

template <class T>
class ThomasBlock {
 public:
  using V = xsimd::batch<T>;
  static constexpr int W = static_cast<int>(V::size);

  ThomasBlock(const TridiagonalArgs& a, std::vector<T>& scratch) : a_(a), n_(a.n) {
    // tiles for the five operands, then c' and d' of the forward sweep
    scratch.resize(static_cast<size_t>(7 * n_ * W) + W);
    T* p = scratch.data();
    while (reinterpret_cast<uintptr_t>(p) % alignof(V) != 0) ++p;
    for (int o = 0; o < Op::count; ++o) tile_[o] = p + o * n_ * W;
    cp_ = p + 5 * n_ * W;
    dp_ = p + 6 * n_ * W;
  }

  // Solves systems [first, first + count) (count <= W); returns the first failure or -1.
  int64_t solve(int64_t first, int count) {
    bind(first, count);
    const int64_t n = n_;
    // Row 0 (lower[0] is outside the matrix).
    V d = load(Op::diag, 0);
    auto bad = is_bad(d);
    V inv = V(T(1)) / d;
    V c = n > 1 ? upper_at(0) * inv : V(T(0));
    V r = load(Op::rhs, 0) * inv;
    c.store_aligned(cp_);
    r.store_aligned(dp_);
    for (int64_t i = 1; i < n; ++i) {
      const V l = lower_at(i);
      d = load(Op::diag, i) - l * c;
      bad = bad | is_bad(d);
      inv = V(T(1)) / d;
      r = (load(Op::rhs, i) - l * r) * inv;
      c = i + 1 < n ? upper_at(i) * inv : V(T(0));
      c.store_aligned(cp_ + i * W);
      r.store_aligned(dp_ + i * W);
    }
    if (xsimd::any(bad)) return first_bad(first, count, bad);
    // Back substitution: x_i = d'_i - c'_i x_{i+1}.
    V x = r;
    store_x(n - 1, x);
    for (int64_t i = n - 2; i >= 0; --i) {
      x = V::load_aligned(dp_ + i * W) - V::load_aligned(cp_ + i * W) * x;
      store_x(i, x);
    }
    if (mode_[Op::x] == Mode::tile) scatter_x(first, count);
    return -1;
  }

 private:
  enum class Mode { unit, broadcast, tile };

  static auto is_bad(const V& d) {
    // zero, infinite or NaN pivot
    return (d == V(T(0))) | !(xsimd::abs(d) < V(std::numeric_limits<T>::infinity()));
  }

  int64_t first_bad(int64_t first, int count, const typename V::batch_bool_type& bad) const {
    alignas(64) bool flags[W];
    bad.store_aligned(flags);
    for (int w = 0; w < count; ++w)
      if (flags[w]) return first + w;
    return first;  // only padding lanes failed: cannot happen (padding solves the identity)
  }

  void bind(int64_t first, int count) {
    for (int o = 0; o < Op::count; ++o) {
      const int64_t* off = a_.off[o] + first;
      base_[o] = (o == Op::x ? static_cast<const T*>(a_.out) : in_ptr<T>(a_, o)) + off[0];
      bool unit = count == W, same = true;
      for (int w = 1; w < count; ++w) {
        unit = unit && off[w] == off[0] + w;
        same = same && off[w] == off[0];
      }
      mode_[o] = unit ? Mode::unit : (same && o != Op::x) ? Mode::broadcast : Mode::tile;
      if (mode_[o] == Mode::tile && o != Op::x) gather(o, off, count);
    }
  }

  // Row-interleaves operand o of `count` systems into its tile; padding lanes solve x = 0 with
  // the identity matrix, so they never report a failure.
  void gather(int o, const int64_t* off, int count) {
    const T* src = in_ptr<T>(a_, o);
    const int64_t step = a_.step[o];
    T* t = tile_[o];
    for (int w = 0; w < count; ++w) {
      const T* p = src + off[w];
      for (int64_t i = 0; i < n_; ++i) t[i * W + w] = p[i * step];
    }
    const T pad = o == Op::diag ? T(1) : T(0);
    for (int w = count; w < W; ++w)
      for (int64_t i = 0; i < n_; ++i) t[i * W + w] = pad;
  }

  V load(int o, int64_t i) const {
    switch (mode_[o]) {
      case Mode::unit: return V::load_unaligned(base_[o] + i * a_.step[o]);
      case Mode::broadcast: return V(base_[o][i * a_.step[o]]);
      case Mode::tile: break;
    }
    return V::load_aligned(tile_[o] + i * W);
  }
  // A's entries (i, i-1) and (i, i+1); A^T's are A's (i-1, i) and (i+1, i).
  V lower_at(int64_t i) const { return a_.transpose ? load(Op::upper, i - 1) : load(Op::lower, i); }
  V upper_at(int64_t i) const { return a_.transpose ? load(Op::lower, i + 1) : load(Op::upper, i); }

  void store_x(int64_t i, const V& x) {
    if (mode_[Op::x] == Mode::unit) x.store_unaligned(const_cast<T*>(base_[Op::x]) + i * a_.step[Op::x]);
    else x.store_aligned(tile_[Op::x] + i * W);
  }
  void scatter_x(int64_t first, int count) {
    T* dst = static_cast<T*>(a_.out);
    const int64_t* off = a_.off[Op::x] + first;
    const int64_t step = a_.step[Op::x];
    const T* t = tile_[Op::x];
    for (int w = 0; w < count; ++w) {
      T* p = dst + off[w];
      for (int64_t i = 0; i < n_; ++i) p[i * step] = t[i * W + w];
    }
  }

  const TridiagonalArgs& a_;
  int64_t n_;
  Mode mode_[Op::count] = {};
  const T* base_[Op::count] = {};
  T* tile_[Op::count] = {};
  T* cp_ = nullptr;
  T* dp_ = nullptr;
};

// ---- partial pivoting: LAPACK gtsv on a contiguous copy of each system ----

template <class T>
void gtsv(int n, T* dl, T* d, T* du, T* b, int* info) {
  const int nrhs = 1;
  if constexpr (sizeof(T) == 8) dgtsv_(&n, &nrhs, dl, d, du, b, &n, info);
  else sgtsv_(&n, &nrhs, dl, d, du, b, &n, info);
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

// ---- dispatch over blocks of systems ----

template <class T>
int64_t thomas_range(const TridiagonalArgs& a, int64_t begin, int64_t end) {
  std::vector<T> scratch;
  ThomasBlock<T> block(a, scratch);
  constexpr int W = ThomasBlock<T>::W;
  for (int64_t s = begin; s < end; s += W) {
    const int64_t failed = block.solve(s, static_cast<int>(std::min<int64_t>(W, end - s)));
    if (failed >= 0) return failed;
  }
  return -1;
}

template <class T>
int64_t tridiagonal(const TridiagonalArgs& a) {
  if (a.systems <= 0 || a.n <= 0) return -1;
  auto range = [&a](int64_t begin, int64_t end) {
    return a.pivoting ? pivoting_range<T>(a, begin, end) : thomas_range<T>(a, begin, end);
  };
  // Blocks of whole SIMD groups with at least ~32k unknowns each are worth a task.
  constexpr int64_t W = ThomasBlock<T>::W;
  const int64_t per_task = std::max<int64_t>(W, ((int64_t{1} << 15) / a.n + W - 1) / W * W);
  if (a.systems <= per_task) return range(0, a.systems);
  std::atomic<int64_t> first_failure{std::numeric_limits<int64_t>::max()};
  const int64_t tasks = (a.systems + per_task - 1) / per_task;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, tasks, 1), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t t = r.begin(); t != r.end(); ++t) {
      const int64_t f = range(t * per_task, std::min(a.systems, (t + 1) * per_task));
      if (f < 0) continue;
      int64_t cur = first_failure.load();
      while (f < cur && !first_failure.compare_exchange_weak(cur, f)) {
      }
    }
  });
  const int64_t f = first_failure.load();
  return f == std::numeric_limits<int64_t>::max() ? -1 : f;
}

}  // namespace

void register_tridiagonal(detail::KernelTable& t) {
  t.tridiagonal[0] = tridiagonal<double>;
  t.tridiagonal[1] = tridiagonal<float>;
}

}  // namespace tenax::cpu
