#pragma once
// The strided N-ary loop every CPU elementwise kernel runs on: drops unit dims, orders dims by the
// output's strides, merges contiguous dims, runs a unit-stride inner loop the compiler vectorises,
// and splits large loops across oneTBB workers (in the caller's task_arena). Also the flat form
// (for_flat: rows of a strided run, planned once by the caller) and Kernel<F, Ts...>, which
// registers both forms of a functor's kernel.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include <xsimd/xsimd.hpp>

#include "tenax/backends/kernels.h"

namespace tenax::cpu {

/// Loops of at least twice this many elements run in parallel (when the output has no broadcast
/// dims), each task getting at least this many: below, a second thread does not pay
/// (bench_threads, bench/RESULTS.md "Threads").
inline constexpr int64_t kParallelGrain = 1 << 15;
/// The same for a costly function (a functor with `kCostly`: the transcendental ops, some 10 to 30
/// ns per element): pieces of 2^12 elements already run 1.8x faster on two threads.
inline constexpr int64_t kCostlyGrain = 1 << 12;
template <class F>
inline constexpr int64_t kGrainOf = [] {
  if constexpr (requires { F::kCostly; }) return F::kCostly ? kCostlyGrain : kParallelGrain;
  return kParallelGrain;
}();
/// The grain to give tbb::blocked_range so that no task gets fewer than `min_units` units of
/// work: a range splits into halves while it is larger than its grain, so a grain of 2 m - 1
/// splits ranges of 2 m and more, into pieces of m and more.
inline int64_t task_grain(int64_t min_units) { return 2 * std::max<int64_t>(1, min_units) - 1; }
/// A loop that moves an axis (an input contiguous along a dim the output is not) runs in bands
/// kTile elements wide along the output's contiguous dim, from kTileMin elements on: a band sweeps
/// the input's contiguous dim, so that input is read as kTile sequential streams (which the
/// hardware prefetchers follow; 16 measured fastest, 8 and 32 slower) and each output row gets
/// whole cache lines, instead of one line per element.
inline constexpr int64_t kTile = 16;
inline constexpr int64_t kTileMin = 1 << 14;

namespace loop_detail {

/// tbb::parallel_for over [0, n) in blocked ranges of grain `grain` (the caller's task_arena),
/// calling body(ctx, begin, end) for each: one instantiation of oneTBB's task types for every
/// kernel (loop.cpp) rather than three per kernel, which made elementwise.cpp and complex.cpp the
/// build's longest compiles. An indirect call per task costs nothing beside its >= 2^12 elements.
using RangeBody = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_ranges(int64_t n, int64_t grain, RangeBody body, void* ctx);
template <class G>
void parallel_ranges(int64_t n, int64_t grain, G& g) {
  parallel_ranges(n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<G*>(c))(b, e); }, &g);
}

template <int N>
struct Plan {
  int rank = 0;
  int64_t sizes[detail::kMaxLoopRank] = {};
  int64_t strides[N][detail::kMaxLoopRank] = {};
};

// The common small-op case: every operand is contiguous over the loop dims or a broadcast scalar.
// Then the loop is one flat dimension (stride 1 or 0 per operand) and needs no sorting or merging.
template <int N>
bool flat_strides(const detail::LoopDims& dims, const detail::LoopArg* args, int64_t* flat) {
  int64_t total = 1;
  for (int a = 0; a < N; ++a) flat[a] = -1;  // not yet known
  for (int d = dims.rank - 1; d >= 0; --d) {
    const int64_t n = dims.sizes[d];
    if (n != 1) {
      for (int a = 0; a < N; ++a) {
        const int64_t st = args[a].strides[d];
        const int64_t kind = st == 0 ? 0 : (st == total ? 1 : 2);
        if (kind == 2 || (flat[a] >= 0 && flat[a] != kind)) return false;
        flat[a] = kind;
      }
    }
    total *= n;
  }
  for (int a = 0; a < N; ++a)
    if (flat[a] < 0) flat[a] = 0;
  return true;
}

template <int N>
bool flat_plan(const detail::LoopDims& dims, const detail::LoopArg* args, Plan<N>& p) {
  int64_t s[N];
  if (!flat_strides<N>(dims, args, s)) return false;
  int64_t total = 1;
  for (int d = 0; d < dims.rank; ++d) total *= dims.sizes[d];
  p.rank = 1;
  p.sizes[0] = total;
  for (int a = 0; a < N; ++a) p.strides[a][0] = s[a];
  return true;
}

template <class... Ts, std::size_t... I>
std::tuple<Ts*...> pointers(const detail::LoopArg* args, std::index_sequence<I...>) {
  return {static_cast<Ts*>(args[I].data)...};
}

template <int N>
Plan<N> make_plan(const detail::LoopDims& dims, const detail::LoopArg* args) {
  Plan<N> p;
  if (flat_plan<N>(dims, args, p)) return p;
  int order[detail::kMaxLoopRank];
  int r = 0;
  for (int d = 0; d < dims.rank; ++d)
    if (dims.sizes[d] != 1) order[r++] = d;
  // Outermost first: larger output stride (then larger first-input stride) goes outside. When
  // the output is reduced into (a zero stride over some dim), the first input's strides decide
  // instead: otherwise the reduced dim, stride 0, would be innermost and every output element a
  // serial chain of strided adds (a [column, depth] adjoint summed over column into [depth]: one
  // addsd per element at add latency; now rows of depth added as vectors, column by column —
  // each output element still gets its terms in the same order, so the same bits).
  bool reduces = false;
  for (int i = 0; i < r; ++i) reduces = reduces || args[0].strides[order[i]] == 0;
  auto magnitude = [](int64_t s) { return s < 0 ? -s : s; };
  auto key_less = [&](int a, int b) {
    const int64_t oa = magnitude(args[0].strides[a]), ob = magnitude(args[0].strides[b]);
    if constexpr (N > 1) {
      const int64_t ia = magnitude(args[1].strides[a]), ib = magnitude(args[1].strides[b]);
      if (reduces && ia != ib) return ia < ib;
      if (oa != ob) return oa < ob;
      return args[1].strides[a] < args[1].strides[b];
    }
    return oa < ob;
  };
  for (int i = 1; i < r; ++i)
    for (int j = i; j > 0 && key_less(order[j - 1], order[j]); --j) std::swap(order[j - 1], order[j]);
  for (int i = 0; i < r; ++i) {
    int d = order[i];
    bool merge = p.rank > 0;
    for (int a = 0; a < N && merge; ++a)
      merge = p.strides[a][p.rank - 1] == args[a].strides[d] * dims.sizes[d];
    if (merge) {
      p.sizes[p.rank - 1] *= dims.sizes[d];
      for (int a = 0; a < N; ++a) p.strides[a][p.rank - 1] = args[a].strides[d];
    } else {
      p.sizes[p.rank] = dims.sizes[d];
      for (int a = 0; a < N; ++a) p.strides[a][p.rank] = args[a].strides[d];
      ++p.rank;
    }
  }
  return p;
}

// Σ src into one destination element with 8 independent partial sums: a serial `dst += x` chain
// is bound by the add latency (4 cycles per element); this runs at load bandwidth.
template <class T>
inline void sum_into(T& dst, const T* src, int64_t len) {
  T part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += src[i + k];
  T total = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; i < len; ++i) total += src[i];
  dst += total;
}

template <class... Ts, class F, std::size_t... I>
inline void inner(int64_t len, std::tuple<Ts*...> ptr, const int64_t* s, F& f,
                  std::index_sequence<I...>) {
  if constexpr (requires { F::kSumReduction; }) {
    if (s[0] == 0 && s[1] == 1 && len >= 16) {
      sum_into(*std::get<0>(ptr), std::get<1>(ptr), len);
      return;
    }
  }
  int64_t i0 = 0;  // a functor with a row form (kRows) does a first part of the row: its own loop
  if constexpr (requires { F::kRows; }) {
    if constexpr (F::kRows) i0 = F::rows(len, ptr, s);
  }
  if constexpr (requires { F::kVectorized; }) {  // a unary op with a vector form (elementwise.cpp)
    if constexpr (F::kVectorized && sizeof...(Ts) == 2) {
      if (s[0] == 1 && s[1] == 1) {
        using T = std::tuple_element_t<0, std::tuple<Ts...>>;
        using B = xsimd::batch<T>;
        T* y = std::get<0>(ptr);
        const T* x = std::get<1>(ptr);
        int64_t i = i0;
        for (; i + int64_t(B::size) <= len; i += int64_t(B::size)) F::vec(B::load_unaligned(x + i)).store_unaligned(y + i);
        for (; i < len; ++i) f(y[i], x[i]);  // the tail: one lane of the same function
        return;
      }
    }
  }
  if (((s[I] == 1) && ...)) {
    for (int64_t i = i0; i < len; ++i) f(std::get<I>(ptr)[i]...);
  } else {
    for (int64_t i = i0; i < len; ++i) f(std::get<I>(ptr)[i * s[I]]...);
  }
}

template <class... Ts, class F, std::size_t... I>
void run_range(const Plan<sizeof...(Ts)>& p, const detail::LoopArg* args, int64_t begin, int64_t end,
               F& f, std::index_sequence<I...> seq) {
  constexpr int N = sizeof...(Ts);
  const int outer = p.rank - 1;
  const int64_t len = p.sizes[outer];
  int64_t idx[detail::kMaxLoopRank] = {};
  int64_t rem = begin;
  for (int d = outer - 1; d >= 0; --d) {
    idx[d] = rem % p.sizes[d];
    rem /= p.sizes[d];
  }
  int64_t off[N];
  for (int a = 0; a < N; ++a) {
    off[a] = 0;
    for (int d = 0; d < outer; ++d) off[a] += idx[d] * p.strides[a][d];
  }
  int64_t s_inner[N];
  for (int a = 0; a < N; ++a) s_inner[a] = p.strides[a][outer];
  for (int64_t it = begin; it < end; ++it) {
    std::tuple<Ts*...> ptr{static_cast<Ts*>(args[I].data) + off[I]...};
    inner<Ts...>(len, ptr, s_inner, f, seq);
    for (int d = outer - 1; d >= 0; --d) {
      for (int a = 0; a < N; ++a) off[a] += p.strides[a][d];
      if (++idx[d] < p.sizes[d]) break;
      for (int a = 0; a < N; ++a) off[a] -= p.strides[a][d] * p.sizes[d];
      idx[d] = 0;
    }
  }
}

// The dim of a transposing loop to tile beside the innermost: where the output is contiguous along
// the innermost dim and some input is contiguous along another dim (at least a tile long) but a
// cache line or more apart along the innermost. -1: none (or the output reduces, or the loop is
// small).
template <int N>
int transposed_dim(const Plan<N>& p, int64_t total) {
  const int in = p.rank - 1;
  if (N < 2 || p.rank < 2 || total < kTileMin || p.strides[0][in] != 1 || p.sizes[in] < kTile) return -1;
  for (int d = 0; d < p.rank; ++d)
    if (p.strides[0][d] == 0) return -1;
  for (int a = 1; a < N; ++a) {
    const int64_t s = p.strides[a][in] < 0 ? -p.strides[a][in] : p.strides[a][in];
    if (s < 8) continue;
    for (int d = 0; d < in; ++d)
      if (p.strides[a][d] == 1 && p.sizes[d] >= kTile) return d;
  }
  return -1;
}

// Whether the output's elements share memory with an input's (then the elements must be visited
// in the plain loop's order: an in-place call may read what it wrote earlier).
template <class... Ts, std::size_t... I>
bool output_overlaps(const Plan<sizeof...(Ts)>& p, const detail::LoopArg* args, std::index_sequence<I...>) {
  constexpr int N = sizeof...(Ts);
  const char* lo[N] = {static_cast<const char*>(args[I].data)...};
  const char* hi[N] = {static_cast<const char*>(args[I].data)...};
  const int64_t size[N] = {static_cast<int64_t>(sizeof(Ts))...};
  for (int a = 0; a < N; ++a) {
    for (int d = 0; d < p.rank; ++d) {
      const int64_t span = p.strides[a][d] * (p.sizes[d] - 1) * size[a];
      (span < 0 ? lo[a] : hi[a]) += span;
    }
    hi[a] += size[a];
  }
  for (int a = 1; a < N; ++a)
    if (lo[a] < hi[0] && lo[0] < hi[a]) return true;
  return false;
}

// A one-row plan (p.rank == 1) in pieces of at least kGrainOf<F> elements across oneTBB's
// workers. Each element is computed as in the serial loop (a vector form's tail lanes are the same
// function), so the bits do not depend on the split. False, having done nothing, where the output
// overlaps an input other than element for element (the serial loop's order would matter).
template <class... Ts, class F, std::size_t... I>
bool split_row(const Plan<sizeof...(Ts)>& p, const detail::LoopArg* args, F& f, std::index_sequence<I...> seq) {
  constexpr int N = sizeof...(Ts);
  if (output_overlaps<Ts...>(p, args, seq))
    for (int a = 1; a < N; ++a)
      if (args[a].data != args[0].data || p.strides[a][0] != p.strides[0][0]) return false;
  int64_t s[N];
  for (int a = 0; a < N; ++a) s[a] = p.strides[a][0];
  auto body = [&](int64_t begin, int64_t end) {
    F local = f;
    std::tuple<Ts*...> ptr{static_cast<Ts*>(args[I].data) + begin * s[I]...};
    inner<Ts...>(end - begin, ptr, s, local, seq);
  };
  parallel_ranges(p.sizes[0], task_grain(kGrainOf<F>), body);
  return true;
}

// Jobs [begin, end) of a banded loop: job j is the band starting at a0 = (j % a_tiles) kTile of the
// innermost dim, at the index of the other outer dims (not `bdim`) given by j / a_tiles; it sweeps
// `bdim` row by row, kTile elements of the innermost dim each.
template <class... Ts, class F, std::size_t... I>
void run_tiled(const Plan<sizeof...(Ts)>& p, const detail::LoopArg* args, int bdim, int64_t begin, int64_t end,
               F& f, std::index_sequence<I...> seq) {
  constexpr int N = sizeof...(Ts);
  const int adim = p.rank - 1;
  const int64_t na = p.sizes[adim], nb = p.sizes[bdim], a_tiles = (na + kTile - 1) / kTile;
  int64_t s_inner[N];
  for (int a = 0; a < N; ++a) s_inner[a] = p.strides[a][adim];
  for (int64_t job = begin; job < end; ++job) {
    int64_t rest = job / a_tiles;
    const int64_t a0 = job % a_tiles * kTile, len = std::min(kTile, na - a0);
    int64_t off[N] = {};
    for (int d = adim - 1; d >= 0; --d) {
      if (d == bdim) continue;
      const int64_t i = rest % p.sizes[d];
      rest /= p.sizes[d];
      for (int a = 0; a < N; ++a) off[a] += i * p.strides[a][d];
    }
    for (int64_t b = 0; b < nb; ++b) {
      std::tuple<Ts*...> ptr{static_cast<Ts*>(args[I].data) + off[I] + b * p.strides[I][bdim] + a0 * s_inner[I]...};
      inner<Ts...>(len, ptr, s_inner, f, seq);
    }
  }
}

// A transposing loop (transposed_dim) in bands, split across oneTBB workers.
template <class... Ts, class F>
bool for_each_tiled(const Plan<sizeof...(Ts)>& p, const detail::LoopArg* args, int64_t total, F& f) {
  auto seq = std::index_sequence_for<Ts...>{};
  const int bdim = transposed_dim<sizeof...(Ts)>(p, total);
  if (bdim < 0 || output_overlaps<Ts...>(p, args, seq)) return false;
  int64_t jobs = (p.sizes[p.rank - 1] + kTile - 1) / kTile;
  for (int d = 0; d + 1 < p.rank; ++d)
    if (d != bdim) jobs *= p.sizes[d];
  const int64_t per_job = kTile * p.sizes[bdim];
  auto body = [&](int64_t begin, int64_t end) {
    F local = f;
    run_tiled<Ts...>(p, args, bdim, begin, end, local, seq);
  };
  parallel_ranges(jobs, task_grain((kParallelGrain + per_job - 1) / per_job), body);
  return true;
}

}  // namespace loop_detail

/// Calls f(args[0][i], args[1][i], ...) (as Ts&...) for every index of `dims`. args[0] is written;
/// when it has a zero stride over a dim of size > 1 (an accumulation into a broadcast), the loop
/// stays serial so each destination element has one writer.
template <class... Ts, class F>
void for_each(const detail::LoopDims& dims, const detail::LoopArg* args, F f) {
  constexpr int N = sizeof...(Ts);
  auto seq = std::index_sequence_for<Ts...>{};
  // Small flat loops (the per-step ops of scans) skip planning altogether.
  int64_t total = 1;
  for (int d = 0; d < dims.rank; ++d) total *= dims.sizes[d];
  if (total == 0) return;
  if (total < 2 * kGrainOf<F>) {
    int64_t s[N];
    if (loop_detail::flat_strides<N>(dims, args, s)) {
      std::tuple<Ts*...> ptr = loop_detail::pointers<Ts...>(args, seq);
      loop_detail::inner<Ts...>(total, ptr, s, f, seq);
      return;
    }
  }
  auto p = loop_detail::make_plan<N>(dims, args);
  if (p.rank == 0) {
    p.rank = 1;
    p.sizes[0] = 1;
  }
  if (loop_detail::for_each_tiled<Ts...>(p, args, total, f)) return;
  int64_t outer_count = 1;
  for (int d = 0; d + 1 < p.rank; ++d) outer_count *= p.sizes[d];
  bool dst_broadcast = false;
  for (int d = 0; d < p.rank; ++d) dst_broadcast |= p.strides[0][d] == 0;
  if (total < 2 * kGrainOf<F> || dst_broadcast) {
    loop_detail::run_range<Ts...>(p, args, 0, outer_count, f, seq);
    return;
  }
  // One long row (contiguous operands merge into one): split the row.
  if (outer_count < 2 && loop_detail::split_row<Ts...>(p, args, f, seq)) return;
  if (outer_count < 2) {
    loop_detail::run_range<Ts...>(p, args, 0, outer_count, f, seq);
    return;
  }
  const int64_t rows_per_task = (kGrainOf<F> + p.sizes[p.rank - 1] - 1) / p.sizes[p.rank - 1];
  auto body = [&](int64_t begin, int64_t end) {
    F local = f;
    loop_detail::run_range<Ts...>(p, args, begin, end, local, seq);
  };
  loop_detail::parallel_ranges(outer_count, task_grain(rows_per_task), body);
}

/// The flat form of for_each (detail::FlatFn): `outer` rows of n elements, strides given, serial.
template <class... Ts, class F, std::size_t... I>
inline void for_flat_impl(int64_t outer, int64_t n, const detail::FlatArg* a, F& f,
                          std::index_sequence<I...> seq) {
  const int64_t s[sizeof...(Ts)] = {a[I].stride...};
  if (outer == 1) {  // most calls: no row arithmetic
    loop_detail::inner<Ts...>(n, std::tuple<Ts*...>{static_cast<Ts*>(a[I].data)...}, s, f, seq);
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    std::tuple<Ts*...> ptr{static_cast<Ts*>(a[I].data) + o * a[I].outer_stride...};
    loop_detail::inner<Ts...>(n, ptr, s, f, seq);
  }
}
template <class... Ts, class F>
inline void for_flat(int64_t outer, int64_t n, const detail::FlatArg* a, F f) {
  for_flat_impl<Ts...>(outer, n, a, f, std::index_sequence_for<Ts...>{});
}

/// The scalar form (detail::ScalarFn): f on the one element each p[i] points at.
template <class... Ts, class F, std::size_t... I>
inline void for_one_impl(void* const* p, F& f, std::index_sequence<I...>) {
  f(*static_cast<Ts*>(p[I])...);
}
template <class... Ts, class F>
inline void for_one(void* const* p, F f) {
  for_one_impl<Ts...>(p, f, std::index_sequence_for<Ts...>{});
}

/// Unused residual slots of a reverse rule arrive as null pointers; they read a zero through a zero
/// stride instead.
template <class T>
void fill_missing(detail::LoopArg* a, int n) {
  static const T zero = T(0);
  for (int i = 0; i < n; ++i)
    if (!a[i].data) {
      a[i].data = const_cast<T*>(&zero);
      for (int64_t& s : a[i].strides) s = 0;
    }
}

/// The reverse rules come in two modes: kAcc accumulates (dst += g D), otherwise dst = g D (a fresh
/// adjoint that this rule writes first and whole: no zero fill, no read of dst).
template <bool kAcc, class T>
inline void put(T& dst, T v) {
  if constexpr (kAcc)
    dst += v;
  else
    dst = v;
}

/// T, once per index of a pack (kArity operands of one element type).
template <class T, std::size_t>
using Same = T;

/// A reverse rule "dst (+)= g * D(p...)" from functor F over kArity operands of type T: the
/// strided form fills absent residual operands with a zero; the flat twin gets them filled by the
/// caller. (backends/cpu/elementwise.cpp and complex.cpp register theirs with it.)
template <class F, class T, int kArity>
struct DerivKernel {
  template <std::size_t... I>
  static void run_all(const detail::LoopDims& d, const detail::LoopArg* a, std::index_sequence<I...>) {
    for_each<Same<T, I>...>(d, a, F{});
  }
  static void run(const detail::LoopDims& d, const detail::LoopArg* in_args) {
    detail::LoopArg args[kArity];
    for (int i = 0; i < kArity; ++i) args[i] = in_args[i];
    fill_missing<T>(args + 2, kArity - 2);
    run_all(d, args, std::make_index_sequence<kArity>{});
  }
  template <std::size_t... I>
  static void flat_all(int64_t outer, int64_t n, const detail::FlatArg* a, std::index_sequence<I...>) {
    for_flat<Same<T, I>...>(outer, n, a, F{});
  }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) {
    flat_all(outer, n, a, std::make_index_sequence<kArity>{});
  }
  template <std::size_t... I>
  static void one_all(void* const* p, std::index_sequence<I...>) {
    for_one<Same<T, I>...>(p, F{});
  }
  static void one(void* const* p) { one_all(p, std::make_index_sequence<kArity>{}); }
};

/// A kernel from a stateless functor F over element types Ts: the strided form and its flat and
/// scalar twins.
template <class F, class... Ts>
struct Kernel {
  static void run(const detail::LoopDims& d, const detail::LoopArg* a) { for_each<Ts...>(d, a, F{}); }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) { for_flat<Ts...>(outer, n, a, F{}); }
  static void one(void* const* p) { for_one<Ts...>(p, F{}); }
  static void into(detail::KernelTable& t, detail::ElementwiseFn& entry) { t.set(entry, &run, &flat, &one); }
};

}  // namespace tenax::cpu
