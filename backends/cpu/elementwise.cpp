// CPU elementwise kernels, expanded from core/ops/elementwise.def: forward, and the fused reverse
// rule "dst (+)= g * D(...)" that accumulates straight into an adjoint (reducing broadcast dims)
// or writes a fresh one. Each kernel also registers its flat and scalar twins (loop.h) for captured
// steps.
#include <cmath>

#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/register.h"
#include "tenax/core/ops/vmath.h"

namespace tenax::cpu {
namespace {

using detail::UnaryOp;
using vmath::exp;
using vmath::fabs;
using vmath::log;
using vmath::log1p;
using vmath::pow;
using vmath::sqrt;
using vmath::tanh;

// The vector form of a unary op over xsimd batches, where vmath defines its functions by vectors
// (loop.h's contiguous loops then run it a batch at a time; each lane has the scalar form's bits).
template <UnaryOp op, class T>
struct VectorForm {
  static constexpr bool kHas = false;
};
template <class T>
struct VectorForm<UnaryOp::tanh, T> {
  static constexpr bool kHas = vmath::kVectorTanh<T>;
  static vmath::Batch<T> apply(const vmath::Batch<T>& x) { return vmath::tanh(x); }
};
template <class T>
struct VectorForm<UnaryOp::exp, T> {
  static constexpr bool kHas = vmath::kVectorExpLog<T>;
  static vmath::Batch<T> apply(const vmath::Batch<T>& x) { return vmath::exp(x); }
};
template <class T>
struct VectorForm<UnaryOp::log, T> {
  static constexpr bool kHas = vmath::kVectorExpLog<T>;
  static vmath::Batch<T> apply(const vmath::Batch<T>& x) { return vmath::log(x); }
};
template <class T>
struct VectorForm<UnaryOp::log1p, T> {
  static constexpr bool kHas = vmath::kVectorExpLog<T>;
  static vmath::Batch<T> apply(const vmath::Batch<T>& x) { return vmath::log1p(x); }
};
// sigmoid and softplus: both branches of their forms read exp(-|x|) (exp(-x) where x >= 0, exp(x)
// where x < 0), so one exp per lane gives the branch the scalar form takes, to the bit, without
// the scalar form's branch (float64's exp is libm's, lane by lane).
template <class T>
struct VectorForm<UnaryOp::sigmoid, T> {
  static constexpr bool kHas = true;
  static vmath::Batch<T> apply(const vmath::Batch<T>& x) {
    const vmath::Batch<T> one(T(1)), e = vmath::exp(-xsimd::abs(x));
    return xsimd::select(x >= vmath::Batch<T>(T(0)), one / (one + e), e / (one + e));
  }
};
template <class T>
struct VectorForm<UnaryOp::softplus, T> {
  static constexpr bool kHas = true;
  static vmath::Batch<T> apply(const vmath::Batch<T>& x) {
    const vmath::Batch<T> l = vmath::log1p(vmath::exp(-xsimd::abs(x)));
    return xsimd::select(x > vmath::Batch<T>(T(0)), x + l, l);
  }
};

#define TENAX_UNARY(name, f, df, saves)                                                  \
  template <class T>                                                                     \
  struct Fwd_##name {                                                                    \
    static constexpr bool kVectorized = VectorForm<UnaryOp::name, T>::kHas;              \
    static constexpr bool kCostly = VectorForm<UnaryOp::name, float>::kHas;              \
    static vmath::Batch<T> vec(const vmath::Batch<T>& x) {                               \
      if constexpr (kVectorized) return VectorForm<UnaryOp::name, T>::apply(x);          \
      return x;                                                                          \
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
