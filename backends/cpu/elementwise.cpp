// CPU elementwise kernels, expanded from core/ops/elementwise.def: forward, and the fused reverse
// rule "dst (+)= g * D(...)" that accumulates straight into an adjoint (reducing broadcast dims)
// or writes a fresh one. Each kernel also registers its flat and scalar twins (loop.h) for captured
// steps.
#include <cmath>
#include <cstdint>
#include <tuple>

#include "tenax/backends/cpu/avx2.h"
#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/register.h"
#include "tenax/backends/cpu/unary_forms.h"
#include "tenax/core/ops/vmath.h"

namespace tenax::cpu {
namespace {

using detail::UnaryOp;

// The whole AVX2 vectors of a contiguous row of a unary op with a vector form (unary_avx2.cpp,
// bitwise the baseline's lanes); how many elements they took.
template <class T>
int64_t unary_rows(UnaryOp op, int64_t n, T* y, int64_t sy, const T* x, int64_t sx) {
#if defined(TENAX_HAVE_AVX2_KERNELS)
  if (sy != 1 || sx != 1 || n < 8 || !cpu_avx2()) return 0;
  return unary_avx2(op, n, y, x);
#else
  (void)op, (void)n, (void)y, (void)sy, (void)x, (void)sx;
  return 0;
#endif
}

using vmath::exp;
using vmath::fabs;
using vmath::log;
using vmath::log1p;
using vmath::pow;
using vmath::sqrt;
using vmath::tanh;

#define TENAX_UNARY(name, f, df, saves)                                                  \
  template <class T>                                                                     \
  struct Fwd_##name {                                                                    \
    static constexpr bool kVectorized = VectorForm<UnaryOp::name, T>::kHas;              \
    static constexpr bool kCostly = VectorForm<UnaryOp::name, float>::kHas;              \
    static vmath::Batch<T> vec(const vmath::Batch<T>& x) {                               \
      if constexpr (kVectorized) return VectorForm<UnaryOp::name, T>::apply(x);          \
      return x;                                                                          \
    }                                                                                    \
    static constexpr bool kRows = kVectorized;                                           \
    static int64_t rows(int64_t n, std::tuple<T*, T*> p, const int64_t* s) {             \
      return unary_rows(UnaryOp::name, n, std::get<0>(p), s[0], std::get<1>(p), s[1]);   \
    }                                                                                    \
    void operator()(T& y, T x) const { y = (f); }                                        \
  };                                                                                     \
  template <class T, bool kAcc>                                                      \
  struct Deriv_##name {                                                              \
    void operator()(T& dst, T g, [[maybe_unused]] T x, [[maybe_unused]] T y) const { \
      put<kAcc>(dst, g * (df));                                                      \
    }                                                                                \
  };
#include "tenax/core/ops/elementwise.def"

#define TENAX_BINARY(name, f, dfa, dfb, saves)                                                             \
  template <class T>                                                                                       \
  struct Fwd_##name {                                                                                      \
    void operator()(T& y, T a, T b) const { y = (f); }                                                     \
  };                                                                                                       \
  template <class T, bool kAcc>                                                                            \
  struct Deriv_##name##_a {                                                                                \
    void operator()(T& dst, T g, [[maybe_unused]] T a, [[maybe_unused]] T b, [[maybe_unused]] T y) const { \
      put<kAcc>(dst, g * (dfa));                                                                           \
    }                                                                                                      \
  };                                                                                                       \
  template <class T, bool kAcc>                                                                            \
  struct Deriv_##name##_b {                                                                                \
    void operator()(T& dst, T g, [[maybe_unused]] T a, [[maybe_unused]] T b, [[maybe_unused]] T y) const { \
      put<kAcc>(dst, g * (dfb));                                                                           \
    }                                                                                                      \
  };
#include "tenax/core/ops/elementwise.def"

template <class T, bool kAcc>
struct DerivOne {
  void operator()(T& dst, T g) const { put<kAcc>(dst, g); }
};
template <class T, bool kAcc>
struct DerivArgmaxMask {
  void operator()(T& dst, T g, T x, T y) const { put<kAcc>(dst, x == y ? g : T(0)); }
};
template <class T, bool kAcc>
struct DerivSoftmax {
  void operator()(T& dst, T g, T x, T y) const { put<kAcc>(dst, g * exp(x - y)); }
};

// Both dtypes and both modes of one reverse rule into the table.
template <template <class, bool> class F, int kArity>
void deriv_entry(detail::KernelTable& t, detail::DerivOp op) {
  auto one = [&](auto tag, int dt) {
    using T = decltype(tag);
    using Acc = DerivKernel<F<T, true>, T, kArity>;
    using Set = DerivKernel<F<T, false>, T, kArity>;
    t.set(t.deriv_acc[int(op)][dt], &Acc::run, &Acc::flat, &Acc::one);
    t.set(t.deriv_set[int(op)][dt], &Set::run, &Set::flat, &Set::one);
  };
  one(double{}, 0);
  one(float{}, 1);
}

template <template <class> class F, std::size_t... I>
void forward_entry(detail::KernelTable& t, detail::ElementwiseFn (&row)[detail::kNumeric], std::index_sequence<I...>) {
  Kernel<F<double>, Same<double, I>...>::into(t, row[0]);
  Kernel<F<float>, Same<float, I>...>::into(t, row[1]);
}

}  // namespace

void register_elementwise(detail::KernelTable& t) {
  using detail::BinaryOp;
  using detail::DerivOp;
  using detail::UnaryOp;
#define TENAX_UNARY(name, f, df, saves)                                                     \
  forward_entry<Fwd_##name>(t, t.unary[int(UnaryOp::name)], std::make_index_sequence<2>{}); \
  deriv_entry<Deriv_##name, 4>(t, DerivOp::unary_##name);
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)                                                \
  forward_entry<Fwd_##name>(t, t.binary[int(BinaryOp::name)], std::make_index_sequence<3>{}); \
  deriv_entry<Deriv_##name##_a, 5>(t, DerivOp::name##_a);                                     \
  deriv_entry<Deriv_##name##_b, 5>(t, DerivOp::name##_b);
#include "tenax/core/ops/elementwise.def"
  deriv_entry<DerivOne, 2>(t, DerivOp::one);
  deriv_entry<DerivArgmaxMask, 4>(t, DerivOp::argmax_mask);
  deriv_entry<DerivSoftmax, 4>(t, DerivOp::softmax);
}

}  // namespace tenax::cpu
