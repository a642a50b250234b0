#pragma once
// The CPU Thomas solve of systems that share one matrix (lower, diag and upper without a batch
// axis: one matrix, many right-hand sides, as in implicit diffusion with a diffusivity that varies
// by depth only). The matrix is factored once per call (factor_shared: the pivots' reciprocals and
// c'), then each system runs two recurrences with no division,
//   d'_i = (r_i - l_i d'_{i-1}) / m_i   (1 / m_i precomputed),   x_i = d'_i - c'_i x_{i+1},
// reading only its right-hand side and writing x: 16 bytes per float64 unknown instead of the
// general solve's 40 (shared_range). Two layouts: each system's rows contiguous (blocks of rows
// transposed in registers, as the rows-inner panels do) and systems adjacent in memory (rows
// loaded straight into vectors); tridiagonal.cpp sends other layouts to the general panels. The
// fused reverse rule (A^T factored once) writes rhs's adjoint and sums the matrix's adjoints
// over the systems, in any layout (others a system at a time).
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

// Row i of operand o (lower, diag or upper) of a matrix every system shares.
template <class T>
T shared_at(const TridiagonalArgs& a, int o, int64_t i) {
  return in_ptr<T>(a, o)[a.off[o][0] + i * a.step[o]];
}

// Factors the matrix every system of `a` shares into f (3n values: row i's lower entry, 0 in row
// 0; 1 / pivot; c', 0 in row n - 1), A^T's where a.transpose. False where a pivot is zero or not
// finite: then every system fails.
template <class T>
bool factor_shared(const TridiagonalArgs& a, T* f) {
  const int64_t n = a.n;
  T *lo = f, *inv = f + n, *cp = f + 2 * n;
  auto at = [&a](int o, int64_t i) { return shared_at<T>(a, o, i); };
  // A^T's (i, i-1) is A's upper of row i-1, its (i, i+1) A's lower of row i+1.
  auto lower = [&](int64_t i) { return a.transpose ? at(Op::upper, i - 1) : at(Op::lower, i); };
  auto upper = [&](int64_t i) { return a.transpose ? at(Op::lower, i + 1) : at(Op::upper, i); };
  T cprev = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T l = i > 0 ? lower(i) : T(0), u = i + 1 < n ? upper(i) : T(0);
    const T m = at(Op::diag, i) - l * cprev;
    if (m == T(0) || !std::isfinite(m)) return false;
    if (std::abs(l * cprev) > kGrowthLimit<T> * (std::abs(l) + std::abs(at(Op::diag, i)) + std::abs(u))) return false;
    lo[i] = l;
    inv[i] = T(1) / m;
    cprev = cp[i] = u * inv[i];
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
  // measured best, from memory and in cache, and at least 2 groups (docs/archive/tuning.md,
  // "Shared matrix: systems per block").
  static constexpr int kGroups = std::max(2, 8 / VS);
  static constexpr int kLanes = kGroups * VS;
  // Adjacent systems go as many at a time as keep d' within kWideScratch bytes (in L2).
  static constexpr int64_t kWideScratch = 400 << 10;
  static constexpr int kWide = 4096;
  static constexpr int64_t kAhead = 2;  // rows prefetched ahead (adjacent systems)

  enum class Layout { none, rows, adjacent };
  // How the right-hand sides and x lie (with the fused reverse rule, TridiagonalArgs::vjp: the
  // cotangents, the forward solution and rhs's adjoint): adjacent (consecutive systems one
  // element apart), rows (each system's rows contiguous), or neither (the general panels solve
  // those; the reverse rule takes them a system at a time, solve_one).
  static Layout layout_of(const TridiagonalArgs& a) {
    using S = TridiagonalArgs::Adjoints;
    const SystemOffsets* where[3] = {&a.off[Op::rhs], &a.off[Op::x], nullptr};
    const int64_t* steps[3] = {&a.step[Op::rhs], &a.step[Op::x], nullptr};
    if (a.vjp) {
      where[1] = &a.vjp->off[S::solution];
      steps[1] = &a.vjp->step[S::solution];
      if (a.vjp->adj[S::adj_rhs - 1]) {
        where[2] = &a.vjp->off[S::adj_rhs];
        steps[2] = &a.vjp->step[S::adj_rhs];
      }
    }
    bool adjacent = true, rows = kRowBlocks;
    for (int k = 0; k < 3; ++k) {
      if (!where[k]) continue;
      adjacent = adjacent && !where[k]->table && where[k]->stride == 1;
      rows = rows && *steps[k] == 1;
    }
    return adjacent ? Layout::adjacent : rows ? Layout::rows : Layout::none;
  }

  SharedSolve(const TridiagonalArgs& a, const T* factor, Scratch<T>& scratch)
      : a_(a),
        n_(a.n),
        lo_(factor),
        inv_(factor + a.n),
        cp_(factor + 2 * a.n),
        ml_(factor),
        sw_(factor + a.n),
        invd_(factor + 2 * a.n),
        du_(factor + 3 * a.n),
        du2_(factor + 4 * a.n),
        layout_(layout_of(a)) {
    width_ = layout_ == Layout::rows ? kLanes : layout_ == Layout::adjacent ? adjacent_width() : 1;
    // t_: d', then x (or λ); with the reverse rule also the forward solution's rows (rows
    // layout) and the sums' vectors, 3 per row.
    const int64_t need = n_ * width_ * (a.vjp && layout_ == Layout::rows ? 2 : 1) + 3 * n_ * VS + 2 * VS;
    if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
    t_ = scratch.data();
    while (reinterpret_cast<uintptr_t>(t_) % alignof(V) != 0) ++t_;
    tx_ = t_ + n_ * width_;
    acc_ = t_ + n_ * width_ * (a.vjp && layout_ == Layout::rows ? 2 : 1);
  }

  // Systems [begin, end). With the fused reverse rule (a.vjp), `sums` (3n values, zero on entry)
  // receives, for this range, Σ λ_i x_{i-1}, Σ λ_i x_i and Σ λ_i x_{i+1} over the systems, row by
  // row (the shared matrix's adjoints, negated, as tridiagonal.cpp writes them), and rhs's
  // adjoint, if wanted, λ system by system.
  void run(int64_t begin, int64_t end, T* sums = nullptr) {
    sums_ = sums;
    if (layout_ == Layout::rows && sums_) std::fill(acc_, acc_ + 3 * n_ * VS, T(0));
    for (int64_t s = begin; s < end; s += width_) {
      const int count = static_cast<int>(std::min<int64_t>(width_, end - s));
      if (layout_ == Layout::rows)
        a_.pivoting ? solve_rows<true>(s, count) : solve_rows<false>(s, count);
      else if (layout_ == Layout::adjacent)
        a_.pivoting ? solve_adjacent<true>(s, count) : solve_adjacent<false>(s, count);
      else
        solve_one(s);
    }
    if (layout_ == Layout::rows && sums_)
      for (int64_t q = 0; q < 3 * n_; ++q) sums_[q] += xsimd::hadd(V::load_aligned(acc_ + q * VS));
    stream_fence();  // streamed x / adjoints are visible before the task completes
  }

 private:
  int adjacent_width() const {
    const int64_t fit = kWideScratch / (n_ * static_cast<int64_t>(sizeof(T))) / VS * VS;
    return static_cast<int>(std::clamp<int64_t>(fit, VS, kWide));
  }

  // ---- each system's rows contiguous ----
  // Systems [s, s + count), count <= kLanes: blocks of VS rows loaded one vector per system and
  // transposed in registers, the groups' recurrences interleaved row by row (kLU: the pivoting
  // LU's, L with its row swaps then U); d' (L's y) and then x kept
  // row-interleaved in t_ (row i, lane k at i * kLanes + k), x written out group by group in row
  // order (each lane's streamed stores then fill whole lines one after another). Missing lanes
  // of a partial block read the last system's rows and write nothing.
  template <bool kLU>
  void solve_rows(int64_t s, int count) {
    const int64_t n = n_, whole = n / VS * VS;
    const T* r[kLanes];
    for (int k = 0; k < kLanes; ++k)
      r[k] = in_ptr<T>(a_, Op::rhs) + a_.off[Op::rhs][s + std::min(k, count - 1)];
    T* t = t_;
    V d[kGroups];
    for (V& v : d) v = V(T(0));
    auto forward = [&](int64_t i, int g, const V& rhs) {
      if constexpr (kLU) {  // d: row i - 1 as eliminated so far; y_{i-1} is final after this step
        if (i == 0) {
          d[g] = rhs;
          return;
        }
        const V m(ml_[i - 1]);
        T* y = t + (i - 1) * kLanes + g * VS;
        if (sw_[i - 1] != T(0)) {
          rhs.store_aligned(y);
          d[g] = d[g] - m * rhs;
        } else {
          d[g].store_aligned(y);
          d[g] = rhs - m * d[g];
        }
      } else {
        d[g] = (rhs - V(lo_[i]) * d[g]) * V(inv_[i]);
        d[g].store_aligned(t + i * kLanes + g * VS);
      }
    };
    // The next block's right-hand sides fetched in address order, spread over the row blocks
    // (tridiagonal_fetch.h): no hardware prefetcher follows kLanes streams a system apart
    // (docs/archive/tuning.md, "Shared matrix: fetching the right-hand sides").
    const int64_t blocks = std::max<int64_t>(1, whole / VS);
    constexpr bool kRhsOnly[NextPanelFetch<T>::kOperands] = {false, false, false, true};
    fetch_.plan(a_, s + kLanes, static_cast<int>(std::clamp<int64_t>(a_.systems - s - kLanes, 0, kLanes)),
                kRhsOnly, blocks);
    // The reverse rule reads this block's forward solution after the sweep: fetched meanwhile
    // (docs/archive/tuning.md, "Shared matrix: fetching the forward solution").
    const char* xs = nullptr;
    int64_t xs_bytes = 0, xs_fetched = 0, xs_per_block = 0;
    if (a_.vjp && sums_) {
      const SystemOffsets& xo = a_.vjp->off[TridiagonalArgs::Adjoints::solution];
      if (!xo.table && xo.stride >= n && xo.stride <= 2 * n) {
        xs = reinterpret_cast<const char*>(static_cast<const T*>(a_.vjp->x) + xo[s]);
        xs_bytes = ((count - 1) * xo.stride + n) * static_cast<int64_t>(sizeof(T));
        xs_per_block = (xs_bytes / 64 + blocks) / blocks * 64;
      }
    }
    for (int64_t i0 = 0; i0 < whole; i0 += VS) {
      if (fetch_.active()) fetch_.step();
      if (xs)
        for (int64_t e = xs_fetched + xs_per_block; xs_fetched < e && xs_fetched < xs_bytes; xs_fetched += 64)
          __builtin_prefetch(xs + xs_fetched, 0, 3);
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
    V xn[kGroups], xnn[kGroups];
    for (V& v : xn) v = V(T(0));
    for (V& v : xnn) v = V(T(0));
    if constexpr (kLU) {  // x_i = (y_i - du_i x_{i+1} - du2_i x_{i+2}) / U_ii (du, du2 zero past the end)
      for (int g = 0; g < kGroups; ++g) d[g].store_aligned(t + (n - 1) * kLanes + g * VS);
      for (int64_t i = n - 1; i >= 0; --i) {
        const V u1(du_[i]), u2(du2_[i]), iv(invd_[i]);
        for (int g = 0; g < kGroups; ++g) {
          T* p = t + i * kLanes + g * VS;
          const V xv = (V::load_aligned(p) - u1 * xn[g] - u2 * xnn[g]) * iv;
          xv.store_aligned(p);
          xnn[g] = xn[g];
          xn[g] = xv;
        }
      }
    } else {
      for (int64_t i = n - 1; i >= 0; --i) {
        const V c(cp_[i]);
        for (int g = 0; g < kGroups; ++g) {
          T* p = t + i * kLanes + g * VS;
          xn[g] = V::load_aligned(p) - c * xn[g];
          xn[g].store_aligned(p);
        }
      }
    }
    if (a_.vjp) {
      accumulate_rows(s, count);
      return;
    }
    T* x[kLanes];
    for (int k = 0; k < count; ++k) x[k] = static_cast<T*>(a_.out) + a_.off[Op::x][s + k];
    rows_out(count, x, false);
  }

  // Lanes k < count of t_ (row i, lane k at i * kLanes + k) to rows dst[k][0 .. n), group by
  // group in row order (each lane's streamed stores then fill whole lines one after another);
  // added to them where `add`.
  void rows_out(int count, T* const (&dst)[kLanes], bool add) const {
    bool streamed = kStreamableVector<V> && !add;
    for (int k = 0; k < count; ++k)
      streamed = streamed && reinterpret_cast<uintptr_t>(dst[k]) % sizeof(V) == 0;
    for (int g = 0; g * VS < count; ++g) {
      auto row = [&dst, g](int k) { return dst[g * VS + k]; };
      const T* src = t_ + g * VS;
      const int lanes = std::min(VS, count - g * VS);
      if (streamed)
        interleaved_to_rows<T, V, true>(src, kLanes, n_, lanes, row,
                                        [](T* p, const V& v) { stream_aligned(p, v); });
      else if (add)
        interleaved_to_rows<T, V, true>(
            src, kLanes, n_, lanes, row,
            [](T* p, const V& v) { (V::load_unaligned(p) + v).store_unaligned(p); },
            [](T& e, T v) { e += v; });
      else
        interleaved_to_rows<T, V, true>(src, kLanes, n_, lanes, row,
                                        [](T* p, const V& v) { v.store_unaligned(p); });
    }
  }

  // The fused reverse rule after solve_rows: λ in t_. The padding lanes' λ is zeroed (they
  // repeat the last system), rhs's adjoint written or added, the forward solution's rows
  // transposed into tx_ the same way, and the products summed into acc_ (vectors per row).
  void accumulate_rows(int64_t s, int count) {
    using S = TridiagonalArgs::Adjoints;
    const S& j = *a_.vjp;
    const int64_t n = n_, whole = n / VS * VS;
    T* t = t_;
    for (int64_t i = 0; i < n; ++i)
      for (int k = count; k < kLanes; ++k) t[i * kLanes + k] = T(0);
    if (j.adj[S::adj_rhs - 1]) {
      T* dst[kLanes];
      for (int k = 0; k < count; ++k)
        dst[k] = static_cast<T*>(j.adj[S::adj_rhs - 1]) + j.off[S::adj_rhs][s + k];
      rows_out(count, dst, !j.assign[S::adj_rhs - 1]);
    }
    if (!sums_) return;
    const T* x[kLanes];
    for (int k = 0; k < kLanes; ++k)
      x[k] = static_cast<const T*>(j.x) + j.off[S::solution][s + std::min(k, count - 1)];
    T* tx = tx_;
    for (int64_t i0 = 0; i0 < whole; i0 += VS)
      for (int g = 0; g < kGroups; ++g) {
        V m[VS];
        for (int k = 0; k < VS; ++k) m[k] = V::load_unaligned(x[g * VS + k] + i0);
        transpose_block<T>(m);
        for (int q = 0; q < VS; ++q) m[q].store_aligned(tx + (i0 + q) * kLanes + g * VS);
      }
    for (int64_t i = whole; i < n; ++i)
      for (int k = 0; k < kLanes; ++k) tx[i * kLanes + k] = x[k][i];
    T *al = acc_, *ad = acc_ + n * VS, *au = acc_ + 2 * n * VS;
    for (int64_t i = 0; i < n; ++i) {
      V l(T(0)), d(T(0)), u(T(0));
      for (int g = 0; g < kGroups; ++g) {
        const int64_t at = i * kLanes + g * VS;
        const V lam = V::load_aligned(t + at);
        d = d + lam * V::load_aligned(tx + at);
        if (i > 0) l = l + lam * V::load_aligned(tx + at - kLanes);
        if (i + 1 < n) u = u + lam * V::load_aligned(tx + at + kLanes);
      }
      (V::load_aligned(al + i * VS) + l).store_aligned(al + i * VS);
      (V::load_aligned(ad + i * VS) + d).store_aligned(ad + i * VS);
      (V::load_aligned(au + i * VS) + u).store_aligned(au + i * VS);
    }
  }

  // ---- systems adjacent in memory ----
  // Systems [s, s + count), count <= width_: row by row, each row of rhs loaded straight into
  // vectors (the rows kAhead on prefetched a line at a time: rows lie a whole batch apart, where
  // the hardware prefetchers restart), d' in t_ (row i at i * width_; kLU: L's y, a row swap
  // exchanging the carried row with the next input row); then x from the last row up, streamed
  // where aligned. The lanes past the last whole vector one by one.
  template <bool kLU>
  void solve_adjacent(int64_t s, int count) {
    const int64_t n = n_, W = width_;
    const int64_t rs = a_.step[Op::rhs], xs = a_.step[Op::x];
    const T* r = in_ptr<T>(a_, Op::rhs) + a_.off[Op::rhs][s];
    T* x = a_.vjp ? nullptr : static_cast<T*>(a_.out) + a_.off[Op::x][s];  // λ stays in t_
    const int nv = count / VS, whole = nv * VS;
    const bool streamed = x && kStreamableVector<V> && reinterpret_cast<uintptr_t>(x) % sizeof(V) == 0 &&
                          (xs * static_cast<int64_t>(sizeof(T))) % static_cast<int64_t>(sizeof(V)) == 0;
    constexpr int kPerLine = std::max<int>(1, 64 / static_cast<int>(sizeof(T)));
    T* t = t_;
    for (int64_t i = 0; i < n; ++i) {
      const T* ri = r + i * rs;
      if (i + kAhead < n)
        for (int w = 0; w < count; w += kPerLine) __builtin_prefetch(ri + kAhead * rs + w, 0, 3);
      T* ti = t + i * W;
      if constexpr (kLU) {  // row i - 1 final after this step (L's row swaps), row i eliminated so far
        if (i == 0) {
          std::copy(ri, ri + count, ti);
          continue;
        }
        T* prev = ti - W;
        const T mi = ml_[i - 1];
        const V m(mi);
        if (sw_[i - 1] != T(0)) {
          for (int v = 0; v < whole; v += VS) {
            const V cv = V::load_aligned(prev + v), rv = V::load_unaligned(ri + v);
            rv.store_aligned(prev + v);
            (cv - m * rv).store_aligned(ti + v);
          }
          for (int w = whole; w < count; ++w) {
            const T cv = prev[w];
            prev[w] = ri[w];
            ti[w] = cv - mi * ri[w];
          }
        } else {
          for (int v = 0; v < whole; v += VS)
            (V::load_unaligned(ri + v) - m * V::load_aligned(prev + v)).store_aligned(ti + v);
          for (int w = whole; w < count; ++w) ti[w] = ri[w] - mi * prev[w];
        }
        continue;
      }
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
      if constexpr (kLU) {  // x_i = (y_i - du_i x_{i+1} - du2_i x_{i+2}) / U_ii
        const T* x1 = i + 1 < n ? ti + W : nullptr;
        const T* x2 = i + 2 < n ? ti + 2 * W : nullptr;
        const T u1 = du_[i], u2 = du2_[i], id = invd_[i];
        const V vu1(u1), vu2(u2), viv(id);
        for (int v = 0; v < whole; v += VS) {
          V y = V::load_aligned(ti + v);
          if (x1) y = y - vu1 * V::load_aligned(x1 + v);
          if (x2) y = y - vu2 * V::load_aligned(x2 + v);
          (y * viv).store_aligned(ti + v);
        }
        for (int w = whole; w < count; ++w)
          ti[w] = (ti[w] - (x1 ? u1 * x1[w] : T(0)) - (x2 ? u2 * x2[w] : T(0))) * id;
      } else {
        const bool last = i + 1 == n;  // x_{n-1} = d'_{n-1}
        const T* next = last ? ti : ti + W;
        const T cs = last ? T(0) : cp_[i];
        const V c(cs);
        for (int v = 0; v < whole; v += VS)
          (last ? V::load_aligned(ti + v) : V::load_aligned(ti + v) - c * V::load_aligned(next + v))
              .store_aligned(ti + v);
        for (int w = whole; w < count; ++w) ti[w] = last ? ti[w] : ti[w] - cs * next[w];
      }
      if (!x) continue;
      T* xi = x + i * xs;
      for (int v = 0; v < whole; v += VS) {
        if (streamed)
          stream_aligned(xi + v, V::load_aligned(ti + v));
        else
          V::load_aligned(ti + v).store_unaligned(xi + v);
      }
      for (int w = whole; w < count; ++w) xi[w] = ti[w];
    }
    if (a_.vjp) accumulate_adjacent(s, count);  // Thomas only: the op fuses no pivoting rule
  }

  // The fused reverse rule after solve_adjacent: λ in t_ (row i at i * width_). Row by row,
  // rhs's adjoint written or added and the products with the forward solution's rows (a batch
  // row apart, prefetched kAhead on) summed into sums_.
  void accumulate_adjacent(int64_t s, int count) {
    using S = TridiagonalArgs::Adjoints;
    const S& j = *a_.vjp;
    const int64_t n = n_, W = width_;
    const int whole = count / VS * VS;
    T* adj = static_cast<T*>(j.adj[S::adj_rhs - 1]);
    if (adj) adj += j.off[S::adj_rhs][s];
    const bool assign = j.assign[S::adj_rhs - 1];
    const T* x = static_cast<const T*>(j.x) + j.off[S::solution][s];
    const int64_t sx = j.step[S::solution];
    constexpr int kPerLine = std::max<int>(1, 64 / static_cast<int>(sizeof(T)));
    for (int64_t i = 0; i < n; ++i) {
      const T* lam = t_ + i * W;
      if (adj) write_or_add(adj + i * j.step[S::adj_rhs], count, assign, [lam](int64_t w) { return lam[w]; });
      if (!sums_) continue;
      const T* xi = x + i * sx;
      if (i + kAhead < n)
        for (int w = 0; w < count; w += kPerLine) __builtin_prefetch(xi + kAhead * sx + w, 0, 3);
      const bool below = i > 0, above = i + 1 < n;
      V l(T(0)), d(T(0)), u(T(0));
      for (int v = 0; v < whole; v += VS) {
        const V lv = V::load_aligned(lam + v);
        d = d + lv * V::load_unaligned(xi + v);
        if (below) l = l + lv * V::load_unaligned(xi - sx + v);
        if (above) u = u + lv * V::load_unaligned(xi + sx + v);
      }
      T sl = xsimd::hadd(l), sd = xsimd::hadd(d), su = xsimd::hadd(u);
      for (int w = whole; w < count; ++w) {
        sd += lam[w] * xi[w];
        if (below) sl += lam[w] * xi[w - sx];
        if (above) su += lam[w] * xi[w + sx];
      }
      sums_[i] += sl;
      sums_[n + i] += sd;
      sums_[2 * n + i] += su;
    }
  }

  // ---- any other layout, with the fused reverse rule: one system at a time ----
  // System s's λ into t_ (n values), then its share of the sums and rhs's adjoint.
  void solve_one(int64_t s) {
    using S = TridiagonalArgs::Adjoints;
    const S& j = *a_.vjp;
    const int64_t n = n_;
    const T* r = in_ptr<T>(a_, Op::rhs) + a_.off[Op::rhs][s];
    const int64_t rs = a_.step[Op::rhs];
    T* t = t_;
    for (int64_t i = 0; i < n; ++i)
      t[i] = i == 0 ? r[0] * inv_[0] : (r[i * rs] - lo_[i] * t[i - 1]) * inv_[i];
    for (int64_t i = n - 2; i >= 0; --i) t[i] -= cp_[i] * t[i + 1];
    if (T* adj = static_cast<T*>(j.adj[S::adj_rhs - 1]))
      write_or_add(adj + j.off[S::adj_rhs][s], n, j.step[S::adj_rhs], j.assign[S::adj_rhs - 1],
                   [t](int64_t i) { return t[i]; });
    if (!sums_) return;
    const T* x = static_cast<const T*>(j.x) + j.off[S::solution][s];
    const int64_t sx = j.step[S::solution];
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) sums_[i] += t[i] * x[(i - 1) * sx];
      sums_[n + i] += t[i] * x[i * sx];
      if (i + 1 < n) sums_[2 * n + i] += t[i] * x[(i + 1) * sx];
    }
  }

  const TridiagonalArgs& a_;
  const int64_t n_;
  // The factor (factor_shared), Thomas: row i's lower entry, 1 / pivot, c'. With a.pivoting the
  // LU's instead (tridiagonal.cpp packs LAPACK gttrf's): L's multiplier of step i, whether step
  // i swaps rows i and i + 1 (1 or 0), 1 / U_ii, U's first and second superdiagonals (zero past
  // the matrix).
  const T *lo_, *inv_, *cp_;
  const T *ml_, *sw_, *invd_, *du_, *du2_;
  const Layout layout_;
  int width_ = 0;
  T *t_ = nullptr, *tx_ = nullptr, *acc_ = nullptr;
  T* sums_ = nullptr;
  NextPanelFetch<T> fetch_;  // the next block's right-hand sides, during solve_rows' sweep
};

// Systems [begin, end) of `a`, whose matrix `factor` holds (factor_shared): the solve, in a
// layout SharedSolve::layout_of accepts, or the fused reverse rule (any layout; `sums` as
// SharedSolve::run says).
template <class T>
void shared_range(const TridiagonalArgs& a, const T* factor, int64_t begin, int64_t end, T* sums) {
  thread_local Scratch<T> scratch;
  SharedSolve<T>(a, factor, scratch).run(begin, end, sums);
}

}  // namespace
}  // namespace tenax::cpu
