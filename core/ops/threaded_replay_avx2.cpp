// The threaded replay's handlers (threaded_handlers.inc) with 256-bit vectors: four doubles per
// vector where the baseline's take two, so a four-element inline call is one load per operand, one
// operation and one store. Compiled with -mavx2, without FMA and with contraction off: each lane is
// the IEEE operation the baseline's lane and the kernels compute, so replays keep their bits.
// Everything here is local to this file but the entry point (tests/check_avx2_symbols.cmake): the
// arithmetic is written out below rather than taken from the headers' inline templates, which the
// linker could otherwise bind baseline callers to.
#include <cstddef>
#include <type_traits>

#include "tenax/core/ops/capture.h"

#if !defined(__AVX2__) || defined(__FMA__)
#error "threaded_replay_avx2.cpp must be compiled with -mavx2 and without -mfma"
#endif

namespace tenax::detail {
namespace {

using K = ScalarLoop::Kind;
typedef double V2 __attribute__((vector_size(16)));
typedef double V4 __attribute__((vector_size(32)));

// The inline forms' arithmetic (scalar_loop.h apply_form_as: elementwise.def's expressions for add,
// sub, mul and neg), for one double or a vector of them.
template <K k, class T>
inline T form(T o, T x, T y) {
  if constexpr (k == K::copy) return x;
  if constexpr (k == K::acc) return o + x;
  if constexpr (k == K::neg) return -x;
  if constexpr (k == K::acc_neg) return o - x;
  if constexpr (k == K::add) return x + y;
  if constexpr (k == K::sub) return x - y;
  if constexpr (k == K::mul) return x * y;
  if constexpr (k == K::mul_acc) return o + x * y;
  return T{};
}

template <class V>
inline V load(const double* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store(double* p, V v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <class V>
inline V splat(double x) {
  V v{};
  for (size_t i = 0; i < sizeof v / sizeof x; ++i) v[i] = x;
  return v;
}

struct Last4 {
  V4 l;
};
template <K k, unsigned M>
inline void one_last(double* o, const double* a, const double* b, double& last) {
  const double r = form<k, double>(M & 1u ? last : *o, M & 2u ? last : *a, M & 4u ? last : *b);
  *o = r;
  last = r;
}
template <K k, unsigned M>
inline void four_last(double* o, const double* a, const double* b, Last4& l) {
  const V4 r =
      form<k, V4>(M & 1u ? l.l : load<V4>(o), M & 2u ? l.l : load<V4>(a), M & 4u ? l.l : load<V4>(b));
  store(o, r);
  l.l = r;
}
// N contiguous elements, b broadcast where B: every load before any store, as the baseline's
// fixed_on (o may be a or b).
template <K k, int N, bool B>
inline void shape_on(double* o, const double* a, const double* b) {
  using V = std::conditional_t<N == 2, V2, V4>;
  constexpr int w = static_cast<int>(sizeof(V) / sizeof(double)), n = N / w;
  V r[n];
  for (int i = 0; i < n; ++i)
    r[i] = form<k, V>(load<V>(o + w * i), load<V>(a + w * i), B ? splat<V>(*b) : load<V>(b + w * i));
  for (int i = 0; i < n; ++i) store(o + w * i, r[i]);
}

}  // namespace

#define TENAX_RUN_THREADED run_threaded_avx2
#include "tenax/core/ops/threaded_handlers.inc"
#undef TENAX_RUN_THREADED

}  // namespace tenax::detail
