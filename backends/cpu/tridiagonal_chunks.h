#pragma once
// The rows-inner Thomas solve whose lanes walk far-apart chunks of the batch, for systems that lie
// back to back ((sys, i) tensors, the usual layout): a range of systems is cut into VS chunks and
// lane k solves chunk k's systems one after another, so each lane reads every operand as one long
// run in address order and writes x the same way — 4 operands x 4 lanes = 16 read streams (4
// doubles per AVX2 vector, 4 floats per SSE one), which the hardware prefetchers follow (16 streams
// measured at full speed, more at a fraction of it). The panels of tridiagonal_thomas.h read 128 runs of
// one system each, which no prefetcher follows: there the next panel is fetched with software prefetches,
// whose own cost held that path well below the roofline. The price here: one division chain per lane
// instead of eight groups', so the sweep is bound by the chain's latency (about 20 cycles a row) where the
// panels were not, still under what memory allows (docs/archive/tuning.md, "Chunked lanes"). Only where
// the call's arrays are larger than the caches (fetch_next_panels), not pivoting, not the fused reverse rule.
// Included only by tridiagonal_avx2.cpp, in an anonymous namespace like the panels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "tenax/backends/cpu/tridiagonal_range.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set

// Whether every operand and x hold their systems back to back (located by a stride of n, rows
// contiguous), the solve is A x = rhs (not A^T) and writes x: the chunked solve's layout.
inline bool chunkable(const TridiagonalArgs& a) {
  if (a.pivoting || a.transpose || a.vjp || !a.out || a.n < 2) return false;
  for (int o = 0; o < Op::count; ++o)
    if (a.off[o].table || a.off[o].stride != a.n || a.step[o] != 1) return false;
  return true;
}

// The lanes' vector: 4 of them, so that the 4 operands make 16 streams — 4 doubles (AVX2), 4
// floats (SSE: 8 would be 32 streams, which the prefetchers lose).
template <class T>
using ChunkVector = std::conditional_t<sizeof(T) == 8, xsimd::batch<T>, xsimd::batch<T, xsimd::sse4_2>>;

template <class T>
class ChunkedThomas {
 public:
  using V = ChunkVector<T>;
  static constexpr int VS = static_cast<int>(V::size);
  static_assert(VS == 4, "four lanes: 16 read streams");

  explicit ChunkedThomas(const TridiagonalArgs& a, Scratch<T>& scratch) : a_(a), n_(a.n) {
    const auto need = static_cast<size_t>(2 * n_ * VS + VS);
    if (scratch.size() < need) scratch.resize(need);
    T* p = scratch.data();
    while (reinterpret_cast<uintptr_t>(p) % alignof(V) != 0) ++p;
    cp_ = p;
    dp_ = p + n_ * VS;
  }

  // Systems [begin, begin + VS q): lane k solves begin + k q + j for j = 0 .. q - 1. The first
  // failed system of that range or -1.
  int64_t solve(int64_t begin, int64_t q) {
    const int64_t n = n_;
    const T* base[Op::x];
    for (int o = 0; o < Op::x; ++o) base[o] = static_cast<const T*>(a_.in[o]) + a_.off[o].base + begin * n;
    T* const xbase = static_cast<T*>(a_.out) + a_.off[Op::x].base + begin * n;
    const int64_t lane = q * n;  // elements from one lane's chunk to the next
    // x is streamed where every lane's rows start on a vector boundary.
    const bool streamed = reinterpret_cast<uintptr_t>(xbase) % sizeof(V) == 0 &&
                          (n * static_cast<int64_t>(sizeof(T))) % static_cast<int64_t>(sizeof(V)) == 0;
    SweepCheck<V> check;
    for (int64_t j = 0; j < q; ++j) {
      const int64_t at = j * n;
      forward(base, at, lane, check);
      if (streamed)
        backward(xbase + at, lane, [](T* p, const V& v) { stream_aligned(p, v); });
      else
        backward(xbase + at, lane, [](T* p, const V& v) { v.store_unaligned(p); });
    }
    stream_fence();
    if (check.flagged()) return first_failed_system<T>(a_, begin, VS * q);
    return -1;
  }

 private:
  // Rows of lane k's system at base[o] + at + k lane, VS rows at a time through a register
  // transpose; c' and d' to the scratch, row-interleaved.
  void forward(const T* const (&base)[Op::x], int64_t at, int64_t lane, SweepCheck<V>& check) const {
    const int64_t n = n_;
    const V zero(T(0)), one(T(1));
    V c = zero, e = zero;
    SweepCheck<V> chk = check;
    auto step = [&](int64_t i, const V& l, const V& d, const V& u, const V& r) {
      const V lj = i > 0 ? l : zero;  // lower[0] is outside the matrix
      const V dj = xsimd::fnma(lj, c, d);
      const V inv = one / dj;
      c = i + 1 < n ? u * inv : zero;  // so is upper[n-1]
      chk.add(dj, inv, c);
      e = xsimd::fnma(lj, e, r) * inv;
      c.store_aligned(cp_ + i * VS);
      e.store_aligned(dp_ + i * VS);
    };
    int64_t i0 = 0;
    for (; i0 + VS <= n; i0 += VS) {
      V m[Op::x][VS];
      for (int o = 0; o < Op::x; ++o) {
        for (int k = 0; k < VS; ++k) m[o][k] = V::load_unaligned(base[o] + at + k * lane + i0);
        transpose_block<T>(m[o]);
      }
      for (int k = 0; k < VS; ++k)
        step(i0 + k, m[Op::lower][k], m[Op::diag][k], m[Op::upper][k], m[Op::rhs][k]);
    }
    for (; i0 < n; ++i0) {  // rows past the last whole block
      alignas(sizeof(V)) T v[Op::x][VS];
      for (int o = 0; o < Op::x; ++o)
        for (int k = 0; k < VS; ++k) v[o][k] = base[o][at + k * lane + i0];
      step(i0, V::load_aligned(v[Op::lower]), V::load_aligned(v[Op::diag]), V::load_aligned(v[Op::upper]),
           V::load_aligned(v[Op::rhs]));
    }
    check = chk;
  }

  // x_i = d'_i - c'_i x_{i+1} from the last row up, each block of VS rows transposed back and
  // stored to the lanes' rows by put (the rows past the last whole block one by one, first).
  template <class Put>
  void backward(T* x, int64_t lane, Put put) const {
    const int64_t n = n_;
    const int64_t whole = n / VS * VS;
    V next(T(0));
    for (int64_t i = n - 1; i >= whole; --i) {
      next = xsimd::fnma(V::load_aligned(cp_ + i * VS), next, V::load_aligned(dp_ + i * VS));
      alignas(sizeof(V)) T v[VS];
      next.store_aligned(v);
      for (int k = 0; k < VS; ++k) x[k * lane + i] = v[k];
    }
    for (int64_t i0 = whole - VS; i0 >= 0; i0 -= VS) {
      V m[VS];
      for (int k = VS - 1; k >= 0; --k) {
        const int64_t i = i0 + k;
        next = xsimd::fnma(V::load_aligned(cp_ + i * VS), next, V::load_aligned(dp_ + i * VS));
        m[k] = next;
      }
      transpose_block<T>(m);
      for (int k = 0; k < VS; ++k) put(x + k * lane + i0, m[k]);
    }
  }

  const TridiagonalArgs& a_;
  int64_t n_;
  T* cp_ = nullptr;
  T* dp_ = nullptr;
};

// Systems per lane for `count` systems of `bytes` each: the most, up to 15 fewer, that keep the
// lanes' starts far apart within a 4 KB page — lanes a multiple of 4 KB apart compete for the same
// L1 sets and are 4K-aliased (1024 systems of 800 bytes per lane: 63% of the roofline against 80%).
inline int64_t lane_systems(int64_t count, int64_t VS, int64_t bytes) {
  const int64_t most = count / VS;
  int64_t best = most, best_gap = -1;
  for (int64_t q = most; q > 0 && q + 16 > most; --q) {
    int64_t gap = 4096;  // the closest two lanes' starts, modulo 4 KB, around the circle
    for (int64_t k = 1; k < VS; ++k) {
      const int64_t d = (k * q * bytes) % 4096;
      gap = std::min(gap, std::min(d, 4096 - d));
    }
    if (gap > best_gap) {
      best = q;
      best_gap = gap;
    }
    if (best_gap >= 4096 / VS) break;  // as far apart as VS lanes can be
  }
  return best;
}

// Systems [begin, end) of a chunkable call: VS chunks of whole systems (lane_systems each), the
// few left over through the panels. The first failed system or -1.
template <class T>
int64_t chunked_range(const TridiagonalArgs& a, int64_t begin, int64_t end) {
  thread_local Scratch<T> scratch;
  constexpr int64_t VS = ChunkedThomas<T>::VS;
  const int64_t q = lane_systems(end - begin, VS, a.n * static_cast<int64_t>(sizeof(T)));
  int64_t failed = -1;
  if (q > 0) failed = ChunkedThomas<T>(a, scratch).solve(begin, q);
  const int64_t rest = begin + VS * q;
  if (rest < end) {
    const int64_t tail = thomas_range<T>(a, rest, end, false);
    if (failed < 0) failed = tail;
  }
  return failed;
}

}  // namespace
}  // namespace tenax::cpu
