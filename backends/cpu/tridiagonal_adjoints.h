#pragma once
// The fused reverse rule's last part for the Thomas panels (tridiagonal_thomas.h): with a panel's
// λ (the solution of A^T λ = x̄) in hand, the adjoints rhs̄ += λ, diaḡ_i -= λ_i x_i,
// lower̄_i -= λ_i x_{i-1}, upper̄_i -= λ_i x_{i+1} (TridiagonalArgs::vjp). Like that header,
// included only by it and in an anonymous namespace: one copy per instruction set.
#include <algorithm>
#include <cstdint>

#include "tenax/backends/cpu/tridiagonal_memory.h"
#include "tenax/backends/cpu/tridiagonal_transpose.h"
#include "tenax/backends/kernels.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set

// Whether x and every wanted adjoint of a's fused reverse rule have contiguous rows.
inline bool adjoint_rows_contiguous(const detail::TridiagonalArgs& a) {
  using S = detail::TridiagonalArgs::Adjoints;
  const S& j = *a.vjp;
  if (a.n == 1) return true;
  if (j.step[S::solution] != 1) return false;
  for (int k = S::adj_lower; k < S::slots; ++k)
    if (j.adj[k - 1] && j.step[k] != 1) return false;
  return true;
}

// Where x and the adjoints have contiguous rows too (the row axis innermost), after solve_rows:
// systems [first, first + count), λ row-interleaved (row i, lane w at lam[i * P + w]). λ is
// transposed back into one contiguous row per system in `rows` (count * n values: the panel's
// c', spent by now); then each adjoint is written one array at a time, system after system, each
// row computed into `tmp` (n values) and streamed out. The panel's systems are usually adjacent,
// so each array is one sequential stream. (The generic loop, accumulate_adjoints, wrote all four
// arrays a system at a time from λ's strided column, a large share of the rows-inner gradient;
// docs/archive/results_history.md.) An adjoint flagged `assign` is written (its lower[0] / upper[n-1]
// entries set to zero), otherwise accumulated.
template <class T, class V, bool kRowBlocks>
void accumulate_rows(const detail::TridiagonalArgs& a, int64_t first, int count, const T* lam_rows, int64_t P,
                     T* rows, T* tmp) {
  using S = detail::TridiagonalArgs::Adjoints;
  constexpr int VS = static_cast<int>(V::size);
  const S& j = *a.vjp;
  const int64_t n = a.n;
  const int groups = (count + VS - 1) / VS;
  for (int g = 0; g < groups; ++g)
    interleaved_to_rows<T, V, kRowBlocks>(
        lam_rows + int64_t{g} * VS, P, n, std::min(VS, count - g * VS),
        [&](int k) { return rows + (int64_t{g} * VS + k) * n; },
        [](T* p, const V& v) { v.store_unaligned(p); });
  const T* const x0 = static_cast<const T*>(j.x);
  // lower̄_0 and upper̄_{n-1} are outside the matrix: zero when written, untouched when accumulated.
  for (int k = S::adj_lower; k < S::slots; ++k) {
    T* const base = static_cast<T*>(j.adj[k - 1]);
    if (!base) continue;
    const bool assign = j.assign[k - 1];
    for (int w = 0; w < count; ++w) {
      const T* lam = rows + int64_t{w} * n;
      const T* x = x0 + j.off[S::solution][first + w];
      const T* src = tmp;
      int64_t lo = 0, hi = n;
      if (k == S::adj_rhs) {
        src = lam;
      } else if (k == S::adj_diag) {
        for (int64_t i = 0; i < n; ++i) tmp[i] = -lam[i] * x[i];
      } else if (k == S::adj_lower) {
        tmp[0] = T(0);
        for (int64_t i = 1; i < n; ++i) tmp[i] = -lam[i] * x[i - 1];
        lo = assign ? 0 : 1;
      } else {
        for (int64_t i = 0; i + 1 < n; ++i) tmp[i] = -lam[i] * x[i + 1];
        tmp[n - 1] = T(0);
        hi = assign ? n : n - 1;
      }
      T* dst = base + j.off[k][first + w];
      if (assign)
        stream_copy<V>(dst, src, n);
      else
        for (int64_t i = lo; i < hi; ++i) dst[i] += src[i];
    }
  }
}

// Any layout: systems [first, first + count), λ row-interleaved as above. An adjoint flagged
// `assign` is written (its lower[0] / upper[n-1] entries set to zero), not accumulated.
template <class T>
void accumulate_adjoints(const detail::TridiagonalArgs& a, int64_t first, int count, const T* lam_rows,
                         int64_t P) {
  using S = detail::TridiagonalArgs::Adjoints;
  // x's rows lie a batch row apart, like the operands' in the panels' sweep: fetched two rows
  // ahead, a cache line at a time.
  constexpr int64_t kAhead = 2, kLineRows = 64 / sizeof(T);
  const S& j = *a.vjp;
  const int64_t n = a.n;
  T* base[S::slots] = {};
  bool unit = true;
  for (int k = 0; k < S::slots; ++k) {
    const void* p = k == S::solution ? j.x : j.adj[k - 1];
    if (!p) continue;
    const detail::SystemOffsets off = j.off[k] + first;
    base[k] = const_cast<T*>(static_cast<const T*>(p)) + off[0];
    for (int w = 1; w < count && unit; ++w) unit = off[w] == off[0] + w;
  }
  const T* x = base[S::solution];
  const int64_t sx = j.step[S::solution];
  const bool set_r = j.assign[S::adj_rhs - 1], set_d = j.assign[S::adj_diag - 1];
  const bool set_l = j.assign[S::adj_lower - 1], set_u = j.assign[S::adj_upper - 1];
  auto zero = [](int64_t) { return T(0); };
  if (unit) {  // adjacent systems: rows outer, the panel's systems inner (vectorised loops)
    for (int64_t i = 0; i < n; ++i) {
      const T* lam = lam_rows + i * P;
      const T* xi = x + i * sx;
      if (i + kAhead < n)
        for (int w = 0; w < count; w += kLineRows) __builtin_prefetch(xi + kAhead * sx + w, 0, 3);
      if (T* r = base[S::adj_rhs])
        write_or_add(r + i * j.step[S::adj_rhs], count, set_r, [&](int64_t w) { return lam[w]; });
      if (T* d = base[S::adj_diag])
        write_or_add(d + i * j.step[S::adj_diag], count, set_d, [&](int64_t w) { return -lam[w] * xi[w]; });
      if (T* l = base[S::adj_lower]) {
        l += i * j.step[S::adj_lower];
        if (i > 0)
          write_or_add(l, count, set_l, [&](int64_t w) { return -lam[w] * xi[w - sx]; });
        else if (set_l)
          write_or_add(l, count, true, zero);
      }
      if (T* u = base[S::adj_upper]) {
        u += i * j.step[S::adj_upper];
        if (i + 1 < n)
          write_or_add(u, count, set_u, [&](int64_t w) { return -lam[w] * xi[w + sx]; });
        else if (set_u)
          write_or_add(u, count, true, zero);
      }
    }
    return;
  }
  for (int w = 0; w < count; ++w) {  // systems apart: one system at a time, rows inner
    auto at = [&](int k) {
      return static_cast<T*>(k == S::solution ? const_cast<void*>(j.x) : j.adj[k - 1]) + j.off[k][first + w];
    };
    const T* xw = at(S::solution);
    const T* lam = lam_rows + w;
    if (j.adj[S::adj_rhs - 1])
      write_or_add(at(S::adj_rhs), n, j.step[S::adj_rhs], set_r, [&](int64_t i) { return lam[i * P]; });
    if (j.adj[S::adj_diag - 1])
      write_or_add(at(S::adj_diag), n, j.step[S::adj_diag], set_d,
                   [&](int64_t i) { return -lam[i * P] * xw[i * sx]; });
    if (j.adj[S::adj_lower - 1]) {
      T* l = at(S::adj_lower);
      const int64_t st = j.step[S::adj_lower];
      if (set_l) l[0] = T(0);
      write_or_add(l + st, n - 1, st, set_l, [&](int64_t i) { return -lam[(i + 1) * P] * xw[i * sx]; });
    }
    if (j.adj[S::adj_upper - 1]) {
      T* u = at(S::adj_upper);
      const int64_t st = j.step[S::adj_upper];
      if (set_u) u[(n - 1) * st] = T(0);
      write_or_add(u, n - 1, st, set_u, [&](int64_t i) { return -lam[i * P] * xw[(i + 1) * sx]; });
    }
  }
}

}  // namespace
}  // namespace tenax::cpu
