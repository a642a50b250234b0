#pragma once
// The CPU Thomas solve of systems that share one matrix (lower, diag and upper without a batch
// axis: one matrix, many right-hand sides, as in implicit diffusion with a diffusivity that varies
// by depth only). The matrix is factored once per call (factor_shared: the pivots' reciprocals and
// c'), then each system runs two recurrences with no division,
//   d'_i = (r_i - l_i d'_{i-1}) / m_i   (1 / m_i precomputed),   x_i = d'_i - c'_i x_{i+1},
// reading only its right-hand side and writing x: 16 bytes per float64 unknown instead of the
// general solve's 40 (shared_range). Two layouts: each system's rows contiguous (blocks of rows
// transposed in registers, as the rows-inner panels do) and systems adjacent in memory (rows
// loaded straight into vectors); tridiagonal.cpp sends other layouts to the general panels.
// Like tridiagonal_thomas.h, in an anonymous namespace: tridiagonal.cpp and tridiagonal_avx2.cpp
// each get their own copy, built with their own flags.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "tenax/backends/cpu/tridiagonal_memory.h"
#include "tenax/backends/cpu/tridiagonal_thomas.h"
#include "tenax/backends/cpu/tridiagonal_transpose.h"
#include "tenax/backends/kernels.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set, see above

// Factors the matrix every system of `a` shares into f (3n values: row i's lower entry, 0 in row
// 0; 1 / pivot; c', 0 in row n - 1), A^T's where a.transpose. False where a pivot is zero or not
// finite: then every system fails.
template <class T>
bool factor_shared(const TridiagonalArgs& a, T* f) {
  const int64_t n = a.n;
  T *lo = f, *inv = f + n, *cp = f + 2 * n;
  auto at = [&a](int o, int64_t i) { return in_ptr<T>(a, o)[a.off[o][0] + i * a.step[o]]; };
  // A^T's (i, i-1) is A's upper of row i-1, its (i, i+1) A's lower of row i+1.
  auto lower = [&](int64_t i) { return a.transpose ? at(Op::upper, i - 1) : at(Op::lower, i); };
  auto upper = [&](int64_t i) { return a.transpose ? at(Op::lower, i + 1) : at(Op::upper, i); };
  T cprev = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T l = i > 0 ? lower(i) : T(0);
    const T m = at(Op::diag, i) - l * cprev;
    if (m == T(0) || !std::isfinite(m)) return false;
    lo[i] = l;
    inv[i] = T(1) / m;
    cprev = cp[i] = i + 1 < n ? upper(i) * inv[i] : T(0);
  }
  return true;
}

template <class T>
class SharedSolve {
 public:
  using V = xsimd::batch<T>;
  static constexpr int VS = static_cast<int>(V::size);
  // Whether this build has the register transposes for the rows-contiguous layout.
  static constexpr bool kRowBlocks = ThomasPanel<T>::kRowBlocks;
  // The rows-contiguous layout runs kGroups groups of VS systems together, row by row, so as
  // many recurrence chains are in flight (each row's is a multiply-add then a multiply). 8 systems
  // (AVX2: 2 groups of 4 doubles) measured best on the Zen 3: at 100 000 x 100, 1.25-1.32 ns per
  // unknown against 1.37-1.41 for 4 systems, 1.34-1.38 for 16 and 1.6 for 32 (in cache, 4 096
  // systems: 0.80 against 1.2, 0.86 and 1.0).
  static constexpr int kGroups = std::max(1, 8 / VS);
  static constexpr int kLanes = kGroups * VS;
  // Adjacent systems go as many at a time as keep d' within kWideScratch bytes (in L2).
  static constexpr int64_t kWideScratch = 400 << 10;
  static constexpr int kWide = 4096;
  static constexpr int64_t kAhead = 2;  // rows prefetched ahead (adjacent systems)

  enum class Layout { none, rows, adjacent };
  // How the right-hand sides and x lie: adjacent (consecutive systems one element apart),
  // rows (each system's rows contiguous), or neither (the general panels solve those).
  static Layout layout_of(const TridiagonalArgs& a) {
    const SystemOffsets &r = a.off[Op::rhs], &x = a.off[Op::x];
    if (!r.table && !x.table && r.stride == 1 && x.stride == 1) return Layout::adjacent;
    if (kRowBlocks && a.step[Op::rhs] == 1 && a.step[Op::x] == 1) return Layout::rows;
    return Layout::none;
  }

  SharedSolve(const TridiagonalArgs& a, const T* factor, Scratch<T>& scratch)
      : a_(a), n_(a.n), lo_(factor), inv_(factor + a.n), cp_(factor + 2 * a.n) {
    width_ = layout_of(a) == Layout::rows ? kLanes : adjacent_width();
    const auto need = static_cast<size_t>(n_ * width_ + VS);
    if (scratch.size() < need) scratch.resize(need);
    t_ = scratch.data();
    while (reinterpret_cast<uintptr_t>(t_) % alignof(V) != 0) ++t_;
  }

  // Systems [begin, end).
  void run(int64_t begin, int64_t end) {
    const bool rows = layout_of(a_) == Layout::rows;
    for (int64_t s = begin; s < end; s += width_) {
      const int count = static_cast<int>(std::min<int64_t>(width_, end - s));
      if (rows)
        solve_rows(s, count);
      else
        solve_adjacent(s, count);
    }
    stream_fence();  // streamed x is visible before the task completes
  }

 private:
  int adjacent_width() const {
    const int64_t fit = kWideScratch / (n_ * static_cast<int64_t>(sizeof(T))) / VS * VS;
    return static_cast<int>(std::clamp<int64_t>(fit, VS, kWide));
  }

  // ---- each system's rows contiguous ----
  // Systems [s, s + count), count <= kLanes: blocks of VS rows loaded one vector per system and
  // transposed in registers, the groups' recurrences interleaved row by row; d' and then x kept
  // row-interleaved in t_ (row i, lane k at i * kLanes + k), x written out group by group in row
  // order (each lane's streamed stores then fill whole lines one after another). Missing lanes
  // of a partial block read the last system's rows and write nothing.
  void solve_rows(int64_t s, int count) {
    const int64_t n = n_, whole = n / VS * VS;
    const T* r[kLanes];
    T* x[kLanes];
    bool streamed = kStreamableVector<V>;
    for (int k = 0; k < kLanes; ++k) {
      const int64_t w = s + std::min(k, count - 1);
      r[k] = in_ptr<T>(a_, Op::rhs) + a_.off[Op::rhs][w];
      x[k] = static_cast<T*>(a_.out) + a_.off[Op::x][w];
      if (k < count) streamed = streamed && reinterpret_cast<uintptr_t>(x[k]) % sizeof(V) == 0;
    }
    T* t = t_;
    V d[kGroups];
    for (V& v : d) v = V(T(0));
    auto forward = [&](int64_t i, int g, const V& rhs) {
      d[g] = (rhs - V(lo_[i]) * d[g]) * V(inv_[i]);
      d[g].store_aligned(t + i * kLanes + g * VS);
    };
    // The next block's right-hand sides fetched in address order, a few lines per row block, where
    // its systems lie (nearly) back to back: no hardware prefetcher follows kLanes streams a
    // system apart (at 100 000 x 100 on the Zen 3, 2.1-2.9 -> 1.3-1.4 ns per unknown).
    const SystemOffsets& ro = a_.off[Op::rhs];
    const bool fetch = !ro.table && ro.stride >= n && ro.stride <= 2 * n && s + 2 * kLanes <= a_.systems;
    const char* next =
        fetch ? reinterpret_cast<const char*>(in_ptr<T>(a_, Op::rhs) + ro[s + kLanes]) : nullptr;
    const int64_t next_bytes = ((kLanes - 1) * ro.stride + n) * static_cast<int64_t>(sizeof(T));
    const int64_t blocks = std::max<int64_t>(1, whole / VS);
    const int64_t per_block = (next_bytes / 64 + blocks) / blocks * 64;
    int64_t fetched = 0;
    for (int64_t i0 = 0; i0 < whole; i0 += VS) {
      if (fetch)
        for (int64_t e = fetched + per_block; fetched < e && fetched < next_bytes; fetched += 64)
          __builtin_prefetch(next + fetched, 0, 3);
      V m[kGroups][VS];
      for (int g = 0; g < kGroups; ++g) {
        for (int k = 0; k < VS; ++k) m[g][k] = V::load_unaligned(r[g * VS + k] + i0);
        transpose_block<T>(m[g]);
      }
      for (int j = 0; j < VS; ++j)
        for (int g = 0; g < kGroups; ++g) forward(i0 + j, g, m[g][j]);
    }
    for (int64_t i = whole; i < n; ++i)  // the rows past the last whole block
      for (int g = 0; g < kGroups; ++g) {
        alignas(sizeof(V)) T v[VS];
        for (int k = 0; k < VS; ++k) v[k] = r[g * VS + k][i];
        forward(i, g, V::load_aligned(v));
      }
    V xn[kGroups];
    for (V& v : xn) v = V(T(0));
    for (int64_t i = n - 1; i >= 0; --i) {
      const V c(cp_[i]);
      for (int g = 0; g < kGroups; ++g) {
        T* p = t + i * kLanes + g * VS;
        xn[g] = V::load_aligned(p) - c * xn[g];
        xn[g].store_aligned(p);
      }
    }
    for (int g = 0; g * VS < count; ++g) {
      const int lanes = std::min(VS, count - g * VS);
      for (int64_t i0 = 0; i0 < whole; i0 += VS) {
        V m[VS];
        for (int j = 0; j < VS; ++j) m[j] = V::load_aligned(t + (i0 + j) * kLanes + g * VS);
        transpose_block<T>(m);
        for (int k = 0; k < lanes; ++k) {
          if (streamed)
            stream_aligned(x[g * VS + k] + i0, m[k]);
          else
            m[k].store_unaligned(x[g * VS + k] + i0);
        }
      }
      for (int64_t i = whole; i < n; ++i)
        for (int k = 0; k < lanes; ++k) x[g * VS + k][i] = t[i * kLanes + g * VS + k];
    }
  }

  // ---- systems adjacent in memory ----
  // Systems [s, s + count), count <= width_: row by row, each row of rhs loaded straight into
  // vectors (the rows kAhead on prefetched a line at a time: rows lie a whole batch apart, where
  // the hardware prefetchers restart), d' in t_ (row i at i * width_); then x from the last row
  // up, streamed where aligned. The lanes past the last whole vector one by one.
  void solve_adjacent(int64_t s, int count) {
    const int64_t n = n_, W = width_;
    const int64_t rs = a_.step[Op::rhs], xs = a_.step[Op::x];
    const T* r = in_ptr<T>(a_, Op::rhs) + a_.off[Op::rhs][s];
    T* x = static_cast<T*>(a_.out) + a_.off[Op::x][s];
    const int nv = count / VS, whole = nv * VS;
    const bool streamed = kStreamableVector<V> && reinterpret_cast<uintptr_t>(x) % sizeof(V) == 0 &&
                          (xs * static_cast<int64_t>(sizeof(T))) % static_cast<int64_t>(sizeof(V)) == 0;
    constexpr int kPerLine = std::max<int>(1, 64 / static_cast<int>(sizeof(T)));
    T* t = t_;
    for (int64_t i = 0; i < n; ++i) {
      const T* ri = r + i * rs;
      if (i + kAhead < n)
        for (int w = 0; w < count; w += kPerLine) __builtin_prefetch(ri + kAhead * rs + w, 0, 3);
      T* ti = t + i * W;
      const V iv(inv_[i]);
      if (i == 0) {
        for (int v = 0; v < whole; v += VS) (V::load_unaligned(ri + v) * iv).store_aligned(ti + v);
        for (int w = whole; w < count; ++w) ti[w] = ri[w] * inv_[i];
        continue;
      }
      const T* prev = ti - W;
      const V l(lo_[i]);
      for (int v = 0; v < whole; v += VS)
        ((V::load_unaligned(ri + v) - l * V::load_aligned(prev + v)) * iv).store_aligned(ti + v);
      for (int w = whole; w < count; ++w) ti[w] = (ri[w] - lo_[i] * prev[w]) * inv_[i];
    }
    for (int64_t i = n - 1; i >= 0; --i) {
      T* ti = t + i * W;
      const bool last = i + 1 == n;  // x_{n-1} = d'_{n-1}
      const T* next = last ? ti : ti + W;
      T* xi = x + i * xs;
      const T cs = last ? T(0) : cp_[i];
      const V c(cs);
      for (int v = 0; v < whole; v += VS) {
        const V xv = last ? V::load_aligned(ti + v) : V::load_aligned(ti + v) - c * V::load_aligned(next + v);
        xv.store_aligned(ti + v);
        if (streamed)
          stream_aligned(xi + v, xv);
        else
          xv.store_unaligned(xi + v);
      }
      for (int w = whole; w < count; ++w) xi[w] = ti[w] = last ? ti[w] : ti[w] - cs * next[w];
    }
  }

  const TridiagonalArgs& a_;
  const int64_t n_;
  const T *lo_, *inv_, *cp_;
  int width_ = 0;
  T* t_ = nullptr;
};

// Systems [begin, end) of `a`, whose matrix `factor` holds (factor_shared), in a layout
// SharedSolve::layout_of accepts.
template <class T>
void shared_range(const TridiagonalArgs& a, const T* factor, int64_t begin, int64_t end) {
  thread_local Scratch<T> scratch;
  SharedSolve<T>(a, factor, scratch).run(begin, end);
}

}  // namespace
}  // namespace tenax::cpu
