// CPU elementwise kernels, expanded from core/ops/elementwise.def: forward, and the fused reverse
// rule "dst += g * D(...)" that accumulates straight into an adjoint (reducing broadcast dims).
#include <cmath>

#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/register.h"

namespace tenax::cpu {
namespace {

using detail::LoopArg;
using detail::LoopDims;
using std::exp;
using std::fabs;
using std::log;
using std::log1p;
using std::pow;
using std::sqrt;
using std::tanh;

// Unused residual slots arrive as null pointers; they read a zero through a zero stride instead.
template <class T>
void fill_missing(LoopArg* a, int n) {
  static const T zero = T(0);
  for (int i = 0; i < n; ++i)
    if (!a[i].data) {
      a[i].data = const_cast<T*>(&zero);
      for (int64_t& s : a[i].strides) s = 0;
    }
}

#define TENAX_UNARY(name, f, df, saves)                                               \
  template <class T>                                                                  \
  void unary_##name(const LoopDims& d, const LoopArg* args) {                         \
    for_each<T, T>(d, args, [](T& y, T x) { y = (f); });                              \
  }                                                                                   \
  template <class T>                                                                  \
  void deriv_unary_##name(const LoopDims& d, const LoopArg* in_args) {                \
    LoopArg args[4] = {in_args[0], in_args[1], in_args[2], in_args[3]};               \
    fill_missing<T>(args + 2, 2);                                                     \
    for_each<T, T, T, T>(d, args, [](T& dst, T g, [[maybe_unused]] T x,               \
                                     [[maybe_unused]] T y) { dst += g * (df); });     \
  }
#include "tenax/core/ops/elementwise.def"

#define TENAX_BINARY(name, f, dfa, dfb, saves)                                             \
  template <class T>                                                                       \
  void binary_##name(const LoopDims& d, const LoopArg* args) {                             \
    for_each<T, T, T>(d, args, [](T& y, T a, T b) { y = (f); });                           \
  }                                                                                        \
  template <class T>                                                                       \
  void deriv_##name##_a(const LoopDims& d, const LoopArg* in_args) {                       \
    LoopArg args[5] = {in_args[0], in_args[1], in_args[2], in_args[3], in_args[4]};        \
    fill_missing<T>(args + 2, 3);                                                          \
    for_each<T, T, T, T, T>(d, args, [](T& dst, T g, [[maybe_unused]] T a,                 \
                                        [[maybe_unused]] T b, [[maybe_unused]] T y) {      \
      dst += g * (dfa);                                                                    \
    });                                                                                    \
  }                                                                                        \
  template <class T>                                                                       \
  void deriv_##name##_b(const LoopDims& d, const LoopArg* in_args) {                       \
    LoopArg args[5] = {in_args[0], in_args[1], in_args[2], in_args[3], in_args[4]};        \
    fill_missing<T>(args + 2, 3);                                                          \
    for_each<T, T, T, T, T>(d, args, [](T& dst, T g, [[maybe_unused]] T a,                 \
                                        [[maybe_unused]] T b, [[maybe_unused]] T y) {      \
      dst += g * (dfb);                                                                    \
    });                                                                                    \
  }
#include "tenax/core/ops/elementwise.def"

template <class T>
void deriv_one(const LoopDims& d, const LoopArg* args) {
  for_each<T, T>(d, args, [](T& dst, T g) { dst += g; });
}
template <class T>
void deriv_argmax_mask(const LoopDims& d, const LoopArg* args) {
  for_each<T, T, T, T>(d, args, [](T& dst, T g, T x, T y) { dst += x == y ? g : T(0); });
}
template <class T>
void deriv_softmax(const LoopDims& d, const LoopArg* args) {
  for_each<T, T, T, T>(d, args, [](T& dst, T g, T x, T y) { dst += g * exp(x - y); });
}

}  // namespace

void register_elementwise(detail::KernelTable& t) {
  using detail::BinaryOp;
  using detail::DerivOp;
  using detail::UnaryOp;
#define TENAX_UNARY(name, f, df, saves)                                           \
  t.unary[int(UnaryOp::name)][0] = unary_##name<double>;                          \
  t.unary[int(UnaryOp::name)][1] = unary_##name<float>;                           \
  t.deriv_acc[int(DerivOp::unary_##name)][0] = deriv_unary_##name<double>;        \
  t.deriv_acc[int(DerivOp::unary_##name)][1] = deriv_unary_##name<float>;
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)                              \
  t.binary[int(BinaryOp::name)][0] = binary_##name<double>;                 \
  t.binary[int(BinaryOp::name)][1] = binary_##name<float>;                  \
  t.deriv_acc[int(DerivOp::name##_a)][0] = deriv_##name##_a<double>;        \
  t.deriv_acc[int(DerivOp::name##_a)][1] = deriv_##name##_a<float>;         \
  t.deriv_acc[int(DerivOp::name##_b)][0] = deriv_##name##_b<double>;        \
  t.deriv_acc[int(DerivOp::name##_b)][1] = deriv_##name##_b<float>;
#include "tenax/core/ops/elementwise.def"
  t.deriv_acc[int(DerivOp::one)][0] = deriv_one<double>;
  t.deriv_acc[int(DerivOp::one)][1] = deriv_one<float>;
  t.deriv_acc[int(DerivOp::argmax_mask)][0] = deriv_argmax_mask<double>;
  t.deriv_acc[int(DerivOp::argmax_mask)][1] = deriv_argmax_mask<float>;
  t.deriv_acc[int(DerivOp::softmax)][0] = deriv_softmax<double>;
  t.deriv_acc[int(DerivOp::softmax)][1] = deriv_softmax<float>;
}

}  // namespace tenax::cpu
