#pragma once
// Library-internal: a replayed float64 kernel call in an inline form (ScalarLoop::Kind: copy,
// accumulate, add, mul, ...), its operands resolved and its loop chosen at planning: for one row,
// a function per kind for the lengths a small step uses (1, 2, 4, 8, 16 contiguous elements, also
// with a broadcast second operand), a general one otherwise; for several rows (a transposed
// operand), 2 x 2 and 4 x 4 unrolled or a general loop. The kernel's own arithmetic: the results
// are the bits the kernel gives.
#include <cstdint>

#include "tenax/core/ops/scalar_loop.h"

namespace tenax::detail {

/// A call of `outer` rows of n elements in an inline form (not Kind::call) with its operands
/// resolved: what a replayed kernel program runs for float64 kernels that have one
/// (core/ops/capture.h). o is written; a and b are read (b is a for the one-operand forms); within
/// a row they step by so, sa, sb elements, from row to row by oo, oa, ob. `run` is chosen for the
/// kind, the sizes and the strides (inline_run); the planning passes may point o, a or b
/// elsewhere (core/ops/copy_forwarding.cpp), never change those.
struct InlineCall : Replayed {
  double* o = nullptr;
  const double* a = nullptr;
  const double* b = nullptr;
  int64_t so = 0, sa = 0, sb = 0, n = 0;
  int64_t outer = 1, oo = 0, oa = 0, ob = 0;
  ScalarLoop::Kind kind = ScalarLoop::Kind::call;
};

namespace inline_detail {

using K = ScalarLoop::Kind;

/// o[i] = f(o[i], a[i], b[i]) for kind k (scalar_loop.h).
template <K k>
inline double apply(double o, double x, double y) {
  return apply_form<k>(o, x, y);
}

/// N contiguous elements (b broadcast when Bcast): every load before any store, so o may be a or
/// b (rows never overlap otherwise), and the compiler pairs the elements into vector instructions.
template <K k, int N, bool Bcast>
inline void fixed_on(double* o, const double* a, const double* b) {
  double r[N];
  for (int i = 0; i < N; ++i) r[i] = apply<k>(o[i], a[i], Bcast ? b[0] : b[i]);
  for (int i = 0; i < N; ++i) o[i] = r[i];
}
template <K k, int N, bool Bcast>
void fixed(const InlineCall& c) {
  fixed_on<k, N, Bcast>(c.o, c.a, c.b);
}

/// Any length and strides: rows of four or more with unit strides four elements at a time (loads
/// before stores, as above), else element by element.
template <K k>
void general(const InlineCall& c) {
  double* o = c.o;
  const double *a = c.a, *b = c.b;
  const int64_t n = c.n;
  if (n >= 4 && c.so == 1 && c.sa == 1 && c.sb == 1) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      double r[4];
      for (int j = 0; j < 4; ++j) r[j] = apply<k>(o[i + j], a[i + j], b[i + j]);
      for (int j = 0; j < 4; ++j) o[i + j] = r[j];
    }
    for (; i < n; ++i) o[i] = apply<k>(o[i], a[i], b[i]);
    return;
  }
  const int64_t so = c.so, sa = c.sa, sb = c.sb;
  for (int64_t i = 0; i < n; ++i) o[i * so] = apply<k>(o[i * so], a[i * sa], b[i * sb]);
}

/// A copy with a strided operand (a gather or scatter: a scan's slice of an inner axis), four
/// elements a round, each element's load and store in general's order, so that overlapping operands
/// read what its loop reads: 3.25 instructions per element against 7.
inline void strided_copy(const InlineCall& c) {
  double* o = c.o;
  const double* a = c.a;
  const int64_t n = c.n, so = c.so, sa = c.sa;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4, o += 4 * so, a += 4 * sa) {
    o[0] = a[0];
    o[so] = a[sa];
    o[2 * so] = a[2 * sa];
    o[3 * so] = a[3 * sa];
  }
  for (; i < n; ++i, o += so, a += sa) *o = *a;
}

/// Several rows (R x C when fixed, else c.outer x c.n), element by element in the kernel's order:
/// a transposed operand may read elements an earlier element of the call wrote (in place), which
/// then reads what the kernel's loop reads.
template <K k, int R, int C>
void rows(const InlineCall& c) {
  const int64_t outer = R > 0 ? R : c.outer, n = C > 0 ? C : c.n;
  const int64_t so = c.so, sa = c.sa, sb = c.sb, oo = c.oo, oa = c.oa, ob = c.ob;
  for (int64_t r = 0; r < outer; ++r) {
    double* o = c.o + r * oo;
    const double *a = c.a + r * oa, *b = c.b + r * ob;
    for (int64_t i = 0; i < n; ++i) o[i * so] = apply<k>(o[i * so], a[i * sa], b[i * sb]);
  }
}

/// A loop on an InlineCall as its `run` (replay_as).
template <void (*F)(const InlineCall&)>
constexpr ReplayFn as_run = &replay_as<InlineCall, F>;

template <K k, bool Bcast>
ReplayFn fixed_for(int64_t n) {
  switch (n) {
    case 2:
      return as_run<fixed<k, 2, Bcast>>;
    case 4:
      return as_run<fixed<k, 4, Bcast>>;
    case 8:
      return as_run<fixed<k, 8, Bcast>>;
    case 16:
      return as_run<fixed<k, 16, Bcast>>;
    default:
      return nullptr;
  }
}

template <K k>
ReplayFn pick(const InlineCall& c) {
  if (c.outer != 1) {
    if (c.outer == 2 && c.n == 2) return as_run<rows<k, 2, 2>>;
    if (c.outer == 4 && c.n == 4) return as_run<rows<k, 4, 4>>;
    return as_run<rows<k, 0, 0>>;
  }
  if (c.n == 1) return as_run<fixed<k, 1, false>>;  // strides do not matter
  ReplayFn f = nullptr;
  if (c.so == 1 && c.sa == 1 && c.sb == 1) f = fixed_for<k, false>(c.n);
  if (c.so == 1 && c.sa == 1 && c.sb == 0) f = fixed_for<k, true>(c.n);
  if constexpr (k == K::copy)
    if (!f && c.n >= 8 && (c.so != 1 || c.sa != 1)) f = as_run<strided_copy>;
  return f ? f : as_run<general<k>>;
}

}  // namespace inline_detail

/// The loop for c's kind, length and strides (null for Kind::call and the moving kinds).
ReplayFn inline_run(const InlineCall& c);

/// The InlineCall of `outer` rows of n elements of a call in form `f` on its flat arguments.
InlineCall resolve_form(const ScalarLoop::Form& f, const FlatArg* args, int64_t outer, int64_t n);

}  // namespace tenax::detail
