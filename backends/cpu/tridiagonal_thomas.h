#pragma once
// The Thomas panels of the CPU tridiagonal solve (tridiagonal.cpp has the overview), compiled once
// per instruction set: tridiagonal.cpp includes this for the build's baseline (SSE2 on x86-64) and
// tridiagonal_avx2.cpp for AVX2 + FMA, chosen at run time. Deliberately in an anonymous namespace:
// each including file gets its own copy, built with its own flags, and no symbol of it is shared
// between the two (a shared one could let the linker pick the AVX2 copy for a CPU without AVX2).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "tenax/backends/cpu/tridiagonal_adjoints.h"
#include "tenax/backends/cpu/tridiagonal_fetch.h"
#include "tenax/backends/cpu/tridiagonal_memory.h"
#include "tenax/backends/cpu/tridiagonal_transpose.h"
#include "tenax/backends/kernels.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set, see above

using detail::SystemOffsets;
using detail::TridiagonalArgs;
using Op = TridiagonalArgs::Operand;

template <class T>
const T* in_ptr(const TridiagonalArgs& a, int o) {
  return static_cast<const T*>(a.in[o]);
}

// ---- Thomas, W systems at a time ----

// Thomas without pivoting is accurate while the elimination's growth stays small: row i's
// multiplier times the previous row's c' (the entry |L||U| adds to row i) at most kGrowthLimit
// times the row's own size |l_i| + |d_i| + |u_i|, 1 / sqrt(eps) (6.7e7 for float64, 2 896 for
// float32), so that at least half the digits survive. A larger growth comes from a pivot tiny
// against its row (docs/decisions.md, "Tiny pivots"); such a system fails like a zero pivot.
template <class T>
constexpr T kGrowthLimit = T(1) / (sizeof(T) == 8 ? T(1.4901161193847656e-08) : T(3.4526698300124393e-04));

// The first of systems [first, first + count) whose elimination meets a zero or non-finite pivot
// or a growth above kGrowthLimit, in order of system, found again one system at a time in scalar
// arithmetic; -1 where none does (a vector kernel's check may flag what only its rounding made
// bad, and flags every |c'| above the limit, a necessary condition for the growth to be).
template <class T>
int64_t first_failed_system(const TridiagonalArgs& a, int64_t first, int64_t count) {
  for (int64_t s = first; s < first + count; ++s) {
    auto at = [&](int o, int64_t i) { return in_ptr<T>(a, o)[a.off[o][s] + i * a.step[o]]; };
    auto lower = [&](int64_t i) { return a.transpose ? at(Op::upper, i - 1) : at(Op::lower, i); };
    auto upper = [&](int64_t i) { return a.transpose ? at(Op::lower, i + 1) : at(Op::upper, i); };
    T c = T(0);
    for (int64_t i = 0; i < a.n; ++i) {
      const T l = i > 0 ? lower(i) : T(0), u = i + 1 < a.n ? upper(i) : T(0);
      const T d = at(Op::diag, i) - l * c;
      if (d == T(0) || !std::isfinite(d)) return s;
      if (std::abs(l * c) > kGrowthLimit<T> * (std::abs(l) + std::abs(at(Op::diag, i)) + std::abs(u))) return s;
      c = u / d;
    }
  }
  return -1;
}

// What a vector sweep sums to find failed systems cheaply: d' (1 / d') per row, NaN exactly where
// some pivot is zero, infinite or NaN (otherwise about 1, or +inf where 1 / d' overflows: one FMA
// per row), and c'^2 per row, above kGrowthLimit^2 wherever some |c'| is above kGrowthLimit
// (needed for too large a growth; two chains, so neither waits for the other).
template <class V>
struct SweepCheck {
  using T = typename V::value_type;
  V pivots = V(T(0)), growth = V(T(0));
  void add(const V& d, const V& inv, const V& c) {
    pivots = xsimd::fma(d, inv, pivots);
    growth = xsimd::fma(c, c, growth);
  }
  // Whether some system may have failed (first_failed_system decides).
  [[nodiscard]] bool flagged() const {
    return xsimd::any(xsimd::isnan(pivots)) || xsimd::any(growth > V(kGrowthLimit<T> * kGrowthLimit<T>));
  }
};

template <class T>
class ThomasPanel {
 public:
  using V = xsimd::batch<T>;
  static constexpr int VS = static_cast<int>(V::size);
  // Panel widths (systems per panel, multiples of VS). Systems adjacent in memory go up to 4096
  // at a time, as many as keep c' and d' within 800 KiB (in L2; float64 at n = 100: 512 systems).
  // Each row of a panel is then a run of 4 KB, too short for the hardware prefetchers (they
  // restart at every row), hence the sweep's own prefetches (kAhead), which made L2-sized panels
  // faster than wide ones in L3. Systems copied into tiles go 32 at a time (16 and 64 measured
  // slower; docs/archive/tuning.md, "Thomas panels: widths").
  static constexpr int kWide = 4096;
  static constexpr int64_t kWideScratch = 800 << 10;
  static constexpr int kNarrow = 32;
  static constexpr bool kStreamable = kStreamableVector<V>;
  // solve_rows transposes VS x VS blocks in registers (SSE2-sized vectors: 2 doubles, 4 floats).
  // In the AVX2 build (tridiagonal_avx2.cpp) 4 doubles: an in-lane unpack, then 128-bit halves
  // swapped; 8 floats: two rounds of in-lane shuffles, then the halves.
#if defined(__AVX__)
  static constexpr bool kRowBlocks = VS == 2 || VS == 4 || (VS == 8 && sizeof(T) == 4);
#else
  static constexpr bool kRowBlocks = VS == 2 || VS == 4;
#endif
  // Systems whose rows are contiguous go 8 groups of VS at a time: 16 doubles (32 floats) in the
  // baseline build, 32 doubles (64 floats) in the AVX2 one. Since the panels fetch the next panel's operands
  // (tridiagonal_fetch.h), a smaller panel keeps both panels and c', d' within L2 (docs/archive/tuning.md,
  // "Thomas panels: rows-inner width").
  static constexpr int kRows = kRowBlocks ? 8 * VS : kNarrow;
  static constexpr int64_t kLineRows = 64 / sizeof(T);  // rows per cache line of one system
  static constexpr int64_t kFetchRows = 2 * kLineRows;
  // The sweep over a run of adjacent systems fetches the operands of row i + kAhead while it
  // works on row i, one cache line at a time: the rows of a panel lie a whole row of the batch
  // apart in memory, where the hardware prefetchers restart at every row (docs/archive/tuning.md,
  // "Thomas panels: prefetching ahead").
  static constexpr int64_t kAhead = 2;
  static constexpr int kVectorsPerLine = std::max<int>(1, 64 / (VS * static_cast<int>(sizeof(T))));

  ThomasPanel(const TridiagonalArgs& a, int width, Scratch<T>& scratch)
      : a_(a), n_(a.n), P_(width), scratch_(scratch) {}

  // The systems this thread solves after the next solve() call (count 0: none); a rows-inner
  // panel fetches their operands while it works (tridiagonal_fetch.h).
  void expect_next(int64_t first, int count) {
    next_first_ = first;
    next_count_ = count;
  }
  // Solves systems [first, first + count) (count <= width); returns the first failure or -1.
  int64_t solve(int64_t first, int count) {
    bind(first, count);
    if (rows_) return solve_rows(first, count);
    const int64_t n = n_;
    const int nv = (count + VS - 1) / VS;
    const V zero(T(0)), one(T(1));
    SweepCheck<V> check;
    // Row 0 (lower[0] is outside the matrix).
    for (int v = 0; v < nv; ++v) {
      const V d = load(Op::diag, 0, v);
      const V inv = one / d;
      const V c = n > 1 ? upper_at(0, v) * inv : zero;
      check.add(d, inv, c);
      c.store_aligned(cp_ + v * VS);
      (load(Op::rhs, 0, v) * inv).store_aligned(dp_ + v * VS);
    }
    if (all_unit())
      sweep<true>(nv, check);
    else
      sweep<false>(nv, check);
    if (check.flagged()) {
      const int64_t f = first_bad(first, count);
      if (f >= 0) return f;  // otherwise only padding lanes, which cannot fail
    }
    back_substitute(nv);
    if (a_.vjp)
      accumulate_adjoints(a_, first, count, dp_, P_);
    else if (mode_[Op::x] == Mode::tile)
      scatter_x(first, count);
    stream_fence();  // streamed x / adjoints are visible before the panel's task completes
    return -1;
  }

 private:
  // unit: a run of adjacent systems; broadcast: one system's values for all; rows: each
  // system's rows contiguous (solve_rows); tile: copied row-interleaved into a tile; none: x not
  // written (the fused reverse rule).
  enum class Mode { unit, broadcast, rows, tile, none };

  // Whether the sweep's operands (x is only written afterwards) are all runs of adjacent systems.
  [[nodiscard]] bool all_unit() const {
    for (int o = 0; o < Op::x; ++o)
      if (mode_[o] != Mode::unit) return false;
    return true;
  }

  // ---- systems apart, each one's rows contiguous (the row axis innermost) ----
  // VS systems make a group (one vector lane each), the panel's groups go through together (their
  // division chains overlap). A block of VS rows of an operand is loaded as one vector per system
  // and transposed in registers into one vector per row, so no operand is copied into a tile; x
  // goes back the same way. c' and d' are laid out as in the other paths (row i, lane w at
  // i * P_ + w), so first_bad and the fused reverse rule work unchanged.

  // m[k] = VS consecutive values of lane k  ->  m[j] = value j of every lane.
  static void transpose(V (&m)[VS]) { transpose_block<T>(m); }

  // m[j] = row r0 + j of operand o for the lanes of group g; rows outside [0, n) read as zero.
  void load_block(int o, int64_t r0, int g, V (&m)[VS]) const {
    const bool inside = r0 >= 0 && r0 + VS <= n_;
    if (mode_[o] == Mode::broadcast) {
      for (int j = 0; j < VS; ++j)
        m[j] = r0 + j >= 0 && r0 + j < n_ ? V(base_[o][(r0 + j) * a_.step[o]]) : V(T(0));
      return;
    }
    const T* const* lane = lane_[o] + g * VS;
    if (inside) {
      for (int k = 0; k < VS; ++k) m[k] = V::load_unaligned(lane[k] + r0);
      transpose(m);
      return;
    }
    alignas(sizeof(V)) T t[VS * VS];
    for (int j = 0; j < VS; ++j)
      for (int k = 0; k < VS; ++k) t[j * VS + k] = r0 + j >= 0 && r0 + j < n_ ? lane[k][r0 + j] : T(0);
    for (int j = 0; j < VS; ++j) m[j] = V::load_aligned(t + j * VS);
  }

  // Copies x (in the d' rows) out to each system's contiguous rows, one group at a time and its
  // rows in order, so each lane's writes fill whole cache lines one after another (streamed past
  // the caches when aligned; a store per row block straight from the back substitution would
  // interleave 32 systems' partial lines).
  void write_rows(int count) const {
    const int groups = (count + VS - 1) / VS;
    bool streamed = kStreamable;
    for (int k = 0; k < count && streamed; ++k)
      streamed = reinterpret_cast<uintptr_t>(lane_[Op::x][k]) % sizeof(V) == 0;
    for (int g = 0; g < groups; ++g) {
      T* const* lane = const_cast<T* const*>(lane_[Op::x]) + g * VS;
      auto row = [lane](int k) { return lane[k]; };
      if (streamed)
        rows_out(g, count, row, [](T* p, const V& v) { stream_aligned(p, v); });
      else
        rows_out(g, count, row, [](T* p, const V& v) { v.store_unaligned(p); });
    }
  }

  // The back substitution and write_rows in one pass where x has contiguous rows and nothing
  // needs x in d' afterwards (no fused reverse rule): x_i = d'_i - c'_i x_{i+1} one group at a
  // time, from the last row up, each block of VS rows transposed in registers and stored to the
  // lanes' rows (streamed when aligned), the rows past the last whole block one by one first.
  // Four lanes at a time write partial lines (two groups at a time, eight, measured slower).
  void back_substitute_rows(int count) const {
    bool streamed = kStreamable;
    for (int k = 0; k < count && streamed; ++k)
      streamed = reinterpret_cast<uintptr_t>(lane_[Op::x][k]) % sizeof(V) == 0;
    const int groups = (count + VS - 1) / VS;
    const bool packed = back_to_back(Op::x, count);
    for (int g = 0; g < groups; ++g) {
      if (streamed && packed)
        back_substitute_group<true>(g, count, [](T* p, const V& v) { stream_aligned(p, v); });
      else if (streamed)
        back_substitute_group<false>(g, count, [](T* p, const V& v) { stream_aligned(p, v); });
      else
        back_substitute_group<false>(g, count, [](T* p, const V& v) { v.store_unaligned(p); });
    }
  }
  // kBackToBack: a full panel whose x holds its systems back to back (as in forward_block).
  template <bool kBackToBack, class Put>
  void back_substitute_group(int g, int count, Put put) const {
    const int64_t n = n_, P = kBackToBack ? int64_t{kRows} : P_, at = int64_t{g} * VS;
    const T* const cp = cp_ + at;
    const T* const dp = dp_ + at;
    T* const* lane = const_cast<T* const*>(lane_[Op::x]) + at;
    T* const xg = kBackToBack ? const_cast<T*>(lane_[Op::x][0]) + at * n : nullptr;
    const int real = kBackToBack ? VS : std::min(VS, count - g * VS);
    const int64_t whole = n / VS * VS;
    V x(T(0));  // c'_{n-1} is zero, so row n-1 comes out as d'_{n-1}
    for (int64_t i = n - 1; i >= whole; --i) {
      x = V::load_aligned(dp + i * P) - V::load_aligned(cp + i * P) * x;
      alignas(sizeof(V)) T t[VS];
      x.store_aligned(t);
      for (int k = 0; k < real; ++k) lane[k][i] = t[k];
    }
    for (int64_t i0 = whole - VS; i0 >= 0; i0 -= VS) {
      V m[VS];
#pragma GCC unroll 8
      for (int j = VS - 1; j >= 0; --j) {
        x = V::load_aligned(dp + (i0 + j) * P) - V::load_aligned(cp + (i0 + j) * P) * x;
        m[j] = x;
      }
      transpose(m);
      if constexpr (kBackToBack) {
#pragma GCC unroll 8
        for (int k = 0; k < VS; ++k) put(xg + k * n + i0, m[k]);
      } else {
        for (int k = 0; k < real; ++k) put(lane[k] + i0, m[k]);
      }
    }
  }

  // d' of group g out to one contiguous row per lane, row i of lane k (< count) to row(k)[i]
  // (tridiagonal_transpose.h).
  template <class Row, class Put>
  void rows_out(int g, int count, Row row, Put put) const {
    interleaved_to_rows<T, V, kRowBlocks>(dp_ + g * VS, P_, n_, std::min(VS, count - g * VS), row, put);
  }

  // Rows i0 .. i0 + VS - 1 of the forward elimination for every group, adding each pivot's check
  // into `check`. kDirect: every operand is in Mode::rows and every row the block reads exists
  // (loaded straight from the lanes); kChecks: the block may hold row 0 or row n-1, where
  // lower[0] and upper[n-1] (outside the matrix) count as zero. kBackToBack (with kDirect): a full
  // panel (kRows systems, P_ == kRows) whose every operand holds its systems back to back, n
  // apart, so lane w's rows start at lane w = 0's plus w * n: addresses computed, not read from
  // the lane tables, and the group count and panel width known at compile time
  // (docs/archive/tuning.md, "Thomas panels: back to back").
  template <bool kDirect, bool kChecks, bool kBackToBack = false>
  void forward_block(int64_t i0, int groups_in, SweepCheck<V>& check) {
    static_assert(kDirect || !kBackToBack);
    const int groups = kBackToBack ? kRows / VS : groups_in;
    const int64_t n = n_, P = kBackToBack ? int64_t{kRows} : P_;
    T* const cp = cp_;
    T* const dp = dp_;
    const V zero(T(0)), one(T(1));
    SweepCheck<V> chk = check;
    // A's (i, i-1) and (i, i+1) entries; A^T's are A's (i-1, i) and (i+1, i).
    const int lo = a_.transpose ? Op::upper : Op::lower, up = a_.transpose ? Op::lower : Op::upper;
    const int64_t lo_row = i0 - (a_.transpose ? 1 : 0), up_row = i0 + (a_.transpose ? 1 : 0);
    // Each lane's rows are a stream of their own, too many for the hardware prefetchers: every
    // cache line's worth of rows, fetch the lines kFetchRows on. Not while the next panel is
    // fetched (tridiagonal_fetch.h), which has brought these lines to the caches already: there
    // the lanes' prefetches only took load slots. (Each branch below prefetches its own way: one
    // loop for all three measured slower; docs/archive/tuning.md, "Thomas panels: lanes' prefetches".)
    const bool ahead = !fetch_.active() && i0 % kLineRows == 0 && i0 + kFetchRows < n;
    // Back to back: the rows this block reads of lane 0 of each operand.
    const T* const lb = kBackToBack ? lane_[lo][0] + lo_row : nullptr;
    const T* const db = kBackToBack ? lane_[Op::diag][0] + i0 : nullptr;
    const T* const rb = kBackToBack ? lane_[Op::rhs][0] + i0 : nullptr;
    const T* const ub = kBackToBack ? lane_[up][0] + up_row : nullptr;
    for (int g = 0; g < groups; ++g) {
      if (fetch_.active()) fetch_.step();
      V l[VS], d[VS], r[VS], u[VS];
      if constexpr (kBackToBack) {
        const int64_t so = int64_t{g} * VS * n;
        if (ahead)
#pragma GCC unroll 8
          for (int k = 0; k < VS; ++k) {
            prefetch(lb + so + k * n + kFetchRows);
            prefetch(db + so + k * n + kFetchRows);
            prefetch(rb + so + k * n + kFetchRows);
            prefetch(ub + so + k * n + kFetchRows);
          }
#pragma GCC unroll 8
        for (int k = 0; k < VS; ++k) {
          l[k] = V::load_unaligned(lb + so + k * n);
          d[k] = V::load_unaligned(db + so + k * n);
          r[k] = V::load_unaligned(rb + so + k * n);
          u[k] = V::load_unaligned(ub + so + k * n);
        }
      } else if constexpr (kDirect) {
        if (ahead)
          for (int o = 0; o < Op::x; ++o)
            for (int k = 0; k < VS; ++k) prefetch(lane_[o][g * VS + k] + i0 + kFetchRows);
        const T* const* ll = lane_[lo] + g * VS;
        const T* const* dl = lane_[Op::diag] + g * VS;
        const T* const* rl = lane_[Op::rhs] + g * VS;
        const T* const* ul = lane_[up] + g * VS;
#pragma GCC unroll 8
        for (int k = 0; k < VS; ++k) {
          l[k] = V::load_unaligned(ll[k] + lo_row);
          d[k] = V::load_unaligned(dl[k] + i0);
          r[k] = V::load_unaligned(rl[k] + i0);
          u[k] = V::load_unaligned(ul[k] + up_row);
        }
      } else {
        if (ahead)
          for (int o = 0; o < Op::x; ++o)
            if (mode_[o] == Mode::rows)
              for (int k = 0; k < VS; ++k) prefetch(lane_[o][g * VS + k] + i0 + kFetchRows);
        load_block(lo, lo_row, g, l);
        load_block(Op::diag, i0, g, d);
        load_block(Op::rhs, i0, g, r);
        load_block(up, up_row, g, u);
      }
      if constexpr (kDirect) {
        transpose(l);
        transpose(d);
        transpose(r);
        transpose(u);
      }
      const int64_t at = g * VS;
      V c = !kChecks || i0 > 0 ? V::load_aligned(cp + (i0 - 1) * P + at) : zero;
      V e = !kChecks || i0 > 0 ? V::load_aligned(dp + (i0 - 1) * P + at) : zero;
      const int rows = kDirect ? VS : static_cast<int>(std::min<int64_t>(VS, n - i0));
#pragma GCC unroll 8
      for (int j = 0; j < rows; ++j) {
        const int64_t i = i0 + j;
        const V lj = !kChecks || i > 0 ? l[j] : zero;  // lower[0] is outside the matrix
        const V dj = d[j] - lj * c;
        const V inv = one / dj;
        c = !kChecks || i + 1 < n ? u[j] * inv : zero;  // so is upper[n-1]
        chk.add(dj, inv, c);
        e = (r[j] - lj * e) * inv;
        c.store_aligned(cp + i * P + at);
        e.store_aligned(dp + i * P + at);
      }
    }
    check = chk;
  }

  // Whether this is a full panel (kRows systems, P_ == kRows) and operand o's lanes hold their
  // systems back to back, n apart (lane w at lane 0 + w n).
  [[nodiscard]] bool back_to_back(int o, int count) const {
    if (count != kRows || P_ != kRows || mode_[o] != Mode::rows) return false;
    if (!a_.off[o].table) return a_.off[o].stride == n_;
    for (int w = 1; w < count; ++w)
      if (lane_[o][w] != lane_[o][0] + w * n_) return false;
    return true;
  }
  // Whether every operand of this full panel holds its systems back to back (forward_block).
  [[nodiscard]] bool back_to_back(int count) const {
    for (int o = 0; o < Op::x; ++o)
      if (!back_to_back(o, count)) return false;
    return true;
  }

  int64_t solve_rows(int64_t first, int count) {
    const int64_t n = n_;
    const int groups = (count + VS - 1) / VS;
    bool rows[Op::x];  // the operands read system by system (broadcasts come from the caches)
    for (int o = 0; o < Op::x; ++o) rows[o] = mode_[o] == Mode::rows;
    fetch_.plan(a_, next_first_, next_count_, rows, (n_ + VS - 1) / VS * groups);
    SweepCheck<V> check;
    bool all_rows = true;
    for (int o = 0; o < Op::x; ++o) all_rows = all_rows && mode_[o] == Mode::rows;
    const bool packed = back_to_back(count);
    for (int64_t i0 = 0; i0 < n; i0 += VS) {
      // Blocks away from the first and last rows, with every operand a lane's rows: no checks.
      // The first and last blocks load directly too where the rows they read exist (A, not A^T).
      const int64_t shift = a_.transpose ? 1 : 0;
      if (packed && i0 >= 1 && i0 + VS + 1 <= n)
        forward_block<true, false, true>(i0, groups, check);
      else if (all_rows && i0 >= 1 && i0 + VS + 1 <= n)
        forward_block<true, false>(i0, groups, check);
      else if (packed && i0 - shift >= 0 && i0 + VS + shift <= n)
        forward_block<true, true, true>(i0, groups, check);
      else if (all_rows && i0 - shift >= 0 && i0 + VS + shift <= n)
        forward_block<true, true>(i0, groups, check);
      else
        forward_block<false, true>(i0, groups, check);
    }
    if (check.flagged()) {
      const int64_t f = first_bad(first, count);
      if (f >= 0) return f;  // otherwise only padding lanes, which cannot fail
    }
    if (mode_[Op::x] == Mode::rows && !a_.vjp) {
      back_substitute_rows(count);
      stream_fence();
      return -1;
    }
    // Back substitution; d' becomes x in place.
    for (int64_t i = n - 2; i >= 0; --i) {
      const T* c = cp_ + i * P_;
      T* e = dp_ + i * P_;
      const T* next = dp_ + (i + 1) * P_;
      for (int g = 0; g < groups; ++g) {
        const int64_t at = g * VS;
        (V::load_aligned(e + at) - V::load_aligned(c + at) * V::load_aligned(next + at))
            .store_aligned(e + at);
      }
    }
    if (mode_[Op::x] == Mode::rows) write_rows(count);
    if (a_.vjp) {
      if (adjoint_rows_contiguous(a_))
        accumulate_rows<T, V, kRowBlocks>(a_, first, count, dp_, P_, cp_, row_);
      else
        accumulate_adjoints(a_, first, count, dp_, P_);
    }
    stream_fence();
    return -1;
  }

  // Rows 1 .. n-1 of the forward elimination. kUnit: every operand is a run of adjacent systems,
  // read through one pointer per row (no per-load dispatch on the operand's mode).
  template <bool kUnit>
  void sweep(int nv, SweepCheck<V>& check) {
    const V zero(T(0)), one(T(1));
    for (int64_t i = 1; i < n_; ++i) {
      const bool last = i + 1 == n_;
      const T* cprev = cp_ + (i - 1) * P_;
      const T* dprev = dp_ + (i - 1) * P_;
      T* c = cp_ + i * P_;
      T* r = dp_ + i * P_;
      const T *li = nullptr, *di = nullptr, *ri = nullptr, *ui = nullptr;
      // The same operands kAhead rows on (nullptr: past the end), fetched a cache line at a time.
      const T *lf = nullptr, *df = nullptr, *rf = nullptr, *uf = nullptr;
      if constexpr (kUnit) {
        // A^T's (i, i-1) is A's upper of row i-1, its (i, i+1) A's lower of row i+1.
        li = lower_row(i);
        di = row(Op::diag, i);
        ri = row(Op::rhs, i);
        if (!last) ui = upper_row(i);
        if (const int64_t f = i + kAhead; f < n_) {
          lf = lower_row(f);
          df = row(Op::diag, f);
          rf = row(Op::rhs, f);
          if (f + 1 < n_) uf = upper_row(f);
        }
      }
      for (int v = 0; v < nv; ++v) {
        if (kUnit && lf && v % kVectorsPerLine == 0) {
          const int64_t at = int64_t{v} * VS;
          prefetch(lf + at);
          prefetch(df + at);
          prefetch(rf + at);
          if (uf) prefetch(uf + at);
        }
        const V l = kUnit ? V::load_unaligned(li + v * VS) : lower_at(i, v);
        const V d = (kUnit ? V::load_unaligned(di + v * VS) : load(Op::diag, i, v)) -
                    l * V::load_aligned(cprev + v * VS);
        const V inv = one / d;
        const V rhs = kUnit ? V::load_unaligned(ri + v * VS) : load(Op::rhs, i, v);
        ((rhs - l * V::load_aligned(dprev + v * VS)) * inv).store_aligned(r + v * VS);
        const V cv = last ? zero : (kUnit ? V::load_unaligned(ui + v * VS) : upper_at(i, v)) * inv;
        check.add(d, inv, cv);
        cv.store_aligned(c + v * VS);
      }
    }
  }

  // x_i = d'_i - c'_i x_{i+1}, x_{n-1} = d'_{n-1}; d' becomes x in place (λ, for the fused
  // reverse rule). x is written through one loop per destination kind, chosen once per panel.
  void back_substitute(int nv) {
    if (mode_[Op::x] == Mode::unit) {
      T* x = const_cast<T*>(base_[Op::x]);
      const int64_t step = a_.step[Op::x];
      const bool streamed = kStreamable && reinterpret_cast<uintptr_t>(x) % sizeof(V) == 0 &&
                            (step * static_cast<int64_t>(sizeof(T))) % static_cast<int64_t>(sizeof(V)) == 0;
      if (streamed)
        back_substitute(nv, [&](int64_t i, int v, const V& r) { stream_aligned(x + i * step + v * VS, r); });
      else
        back_substitute(nv, [&](int64_t i, int v, const V& r) { r.store_unaligned(x + i * step + v * VS); });
    } else if (mode_[Op::x] == Mode::tile) {
      back_substitute(nv,
                      [&](int64_t i, int v, const V& r) { r.store_aligned(tile_[Op::x] + i * P_ + v * VS); });
    } else {
      back_substitute(nv, [](int64_t, int, const V&) {});
    }
  }
  template <class Store>
  void back_substitute(int nv, Store store) {
    const int64_t n = n_;
    for (int v = 0; v < nv; ++v) store(n - 1, v, V::load_aligned(dp_ + (n - 1) * P_ + v * VS));
    for (int64_t i = n - 2; i >= 0; --i) {
      const T* c = cp_ + i * P_;
      T* r = dp_ + i * P_;
      const T* xnext = dp_ + (i + 1) * P_;
      for (int v = 0; v < nv; ++v) {
        const V x =
            V::load_aligned(r + v * VS) - V::load_aligned(c + v * VS) * V::load_aligned(xnext + v * VS);
        x.store_aligned(r + v * VS);
        store(i, v, x);
      }
    }
  }

  // The first system of the panel whose elimination meets a bad pivot, found again lane by lane.
  int64_t first_bad(int64_t first, int count) const { return first_failed_system<T>(a_, first, count); }

  // c' and d' of the forward sweep, then (only when some operand needs one) a row-interleaved tile
  // per operand. The buffer is the thread's, kept from call to call (a scan step calls this every
  // step), and only grows; pointers are set here, at the start of each panel.
  void lay_out(bool tiles) {
    // d' starts kSkew elements past a multiple of c''s size: rows i of c' and d' (read together)
    // would otherwise sit a large power-of-two-ish distance apart, in the same cache sets.
    constexpr int64_t kSkew = 72;
    const int64_t panels = (tiles ? 7 : 2) * n_ * P_ + kSkew;
    const auto need = static_cast<size_t>(panels + n_ + VS);
    if (scratch_.size() < need) scratch_.resize(need);
    T* p = scratch_.data();
    while (reinterpret_cast<uintptr_t>(p) % alignof(V) != 0) ++p;
    cp_ = p;
    dp_ = p + n_ * P_ + kSkew;
    for (int o = 0; o < Op::count; ++o) tile_[o] = tiles ? dp_ + (1 + o) * n_ * P_ : nullptr;
    row_ = p + panels;
  }

  void bind(int64_t first, int count) {
    bool tiles = false;
    for (int o = 0; o < Op::count; ++o) {
      if (o == Op::x && !a_.out) {  // the fused reverse rule keeps λ in d'
        mode_[o] = Mode::none;
        continue;
      }
      const SystemOffsets off = a_.off[o] + first;
      base_[o] = (o == Op::x ? static_cast<const T*>(a_.out) : in_ptr<T>(a_, o)) + off[0];
      bool unit = count % VS == 0, same = true;
      if (!off.table) {  // located by a stride: no need to look at each system
        unit = unit && (count < 2 || off.stride == 1);
        same = count < 2 || off.stride == 0;
      } else {
        for (int w = 1; w < count; ++w) {
          unit = unit && off[w] == off[0] + w;
          same = same && off[w] == off[0];
        }
      }
      mode_[o] = unit ? Mode::unit : (same && o != Op::x) ? Mode::broadcast : Mode::tile;
      tiles = tiles || mode_[o] == Mode::tile;
    }
    rows_ = tiles && kRowBlocks && count <= kRows;
    for (int o = 0; o < Op::count && rows_; ++o)
      rows_ = mode_[o] == Mode::none || mode_[o] == Mode::broadcast ||
              (mode_[o] == Mode::tile && a_.step[o] == 1);
    if (rows_) {
      tiles = false;
      for (int o = 0; o < Op::count; ++o) {
        if (mode_[o] != Mode::tile) continue;
        mode_[o] = Mode::rows;
        const T* src = o == Op::x ? static_cast<const T*>(a_.out) : in_ptr<T>(a_, o);
        const SystemOffsets off = a_.off[o] + first;
        // Padding lanes (past count, up to a whole group) read the last system again and are
        // never written. (A panel may be wider than kRows, a narrow tiled one holding few systems.)
        const int lanes = (count + VS - 1) / VS * VS;
        for (int w = 0; w < lanes; ++w) lane_[o][w] = src + off[std::min(w, count - 1)];
      }
    }
    lay_out(tiles);  // (re)points into the thread's scratch, which another panel may have grown
    for (int o = 0; o < Op::x; ++o)
      if (mode_[o] == Mode::tile) gather(o, a_.off[o] + first, count);
  }

  // Row-interleaves operand o of `count` systems into its tile; padding lanes (up to the next
  // multiple of VS) solve x = 0 with the identity matrix, so they never fail.
  void gather(int o, const SystemOffsets& off, int count) {
    const T* src = in_ptr<T>(a_, o);
    const int64_t step = a_.step[o];
    T* t = tile_[o];
    for (int w = 0; w < count; ++w) {
      const T* p = src + off[w];
      for (int64_t i = 0; i < n_; ++i) t[i * P_ + w] = p[i * step];
    }
    const T pad = o == Op::diag ? T(1) : T(0);
    const int padded = (count + VS - 1) / VS * VS;
    for (int w = count; w < padded; ++w)
      for (int64_t i = 0; i < n_; ++i) t[i * P_ + w] = pad;
  }

  // Row i of operand o of a run of adjacent systems (Mode::unit).
  const T* row(int o, int64_t i) const { return base_[o] + i * a_.step[o]; }
  // Rows of A's entries (i, i-1) and (i, i+1) of a run of adjacent systems (see lower_at).
  const T* lower_row(int64_t i) const { return a_.transpose ? row(Op::upper, i - 1) : row(Op::lower, i); }
  const T* upper_row(int64_t i) const { return a_.transpose ? row(Op::lower, i + 1) : row(Op::upper, i); }
  static void prefetch(const T* p) { __builtin_prefetch(p, 0, 3); }

  // Row i of operand o for the systems of vector v.
  V load(int o, int64_t i, int v) const {
    switch (mode_[o]) {
      case Mode::unit:
        return V::load_unaligned(base_[o] + i * a_.step[o] + v * VS);
      case Mode::broadcast:
        return V(base_[o][i * a_.step[o]]);
      case Mode::rows:  // only read by solve_rows
      case Mode::tile:
      case Mode::none:
        break;
    }
    return V::load_aligned(tile_[o] + i * P_ + v * VS);
  }
  // A's entries (i, i-1) and (i, i+1); A^T's are A's (i-1, i) and (i+1, i).
  V lower_at(int64_t i, int v) const {
    return a_.transpose ? load(Op::upper, i - 1, v) : load(Op::lower, i, v);
  }
  V upper_at(int64_t i, int v) const {
    return a_.transpose ? load(Op::lower, i + 1, v) : load(Op::upper, i, v);
  }

  void scatter_x(int64_t first, int count) {
    T* dst = static_cast<T*>(a_.out);
    const SystemOffsets off = a_.off[Op::x] + first;
    const int64_t step = a_.step[Op::x];
    const T* t = tile_[Op::x];
    for (int w = 0; w < count; ++w) {
      T* p = dst + off[w];
      if (step == 1)
        stream_values(p, n_, [&](int64_t i) { return t[i * P_ + w]; });
      else
        for (int64_t i = 0; i < n_; ++i) p[i * step] = t[i * P_ + w];
    }
  }

  const TridiagonalArgs& a_;
  int64_t n_;
  int P_;
  Mode mode_[Op::count] = {};
  const T* base_[Op::count] = {};
  Scratch<T>& scratch_;
  T* tile_[Op::count] = {};
  T* cp_ = nullptr;
  T* dp_ = nullptr;
  T* row_ = nullptr;                        // one system's row (accumulate_rows)
  bool rows_ = false;                       // this panel goes through solve_rows
  int64_t next_first_ = 0;                  // expect_next
  int next_count_ = 0;
  NextPanelFetch<T> fetch_;  // of the next panel, during solve_rows' sweep
  // Mode::rows: each lane's system (row 0); set by bind for the operands in that mode, the only
  // ones read (not zero-filled: 1.25 KB per call in the AVX2 build, a scan step's calls add up).
  const T* lane_[Op::count][kRows];
};

}  // namespace
}  // namespace tenax::cpu
