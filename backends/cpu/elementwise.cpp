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

// The reverse rules come in two modes: kAcc accumulates (dst += g D), otherwise dst = g D (a fresh
// adjoint that this rule writes first and whole: no zero fill, no read of dst).
template <bool kAcc, class T>
inline void put(T& dst, T v) {
  if constexpr (kAcc)
    dst += v;
  else
    dst = v;
}

#define TENAX_UNARY(name, f, df, saves)                                                   \
  template <class T>                                                                      \
  void unary_##name(const LoopDims& d, const LoopArg* args) {                             \
    for_each<T, T>(d, args, [](T& y, T x) { y = (f); });                                  \
  }                                                                                       \
  template <class T, bool kAcc>                                                           \
  void deriv_unary_##name(const LoopDims& d, const LoopArg* in_args) {                    \
    LoopArg args[4] = {in_args[0], in_args[1], in_args[2], in_args[3]};                   \
    fill_missing<T>(args + 2, 2);                                                         \
    for_each<T, T, T, T>(d, args, [](T& dst, T g, [[maybe_unused]] T x,                   \
                                     [[maybe_unused]] T y) { put<kAcc>(dst, g * (df)); }); \
  }
#include "tenax/core/ops/elementwise.def"

#define TENAX_BINARY(name, f, dfa, dfb, saves)                                             \
  template <class T>                                                                       \
  void binary_##name(const LoopDims& d, const LoopArg* args) {                             \
    for_each<T, T, T>(d, args, [](T& y, T a, T b) { y = (f); });                           \
  }                                                                                        \
  template <class T, bool kAcc>                                                            \
  void deriv_##name##_a(const LoopDims& d, const LoopArg* in_args) {                       \
    LoopArg args[5] = {in_args[0], in_args[1], in_args[2], in_args[3], in_args[4]};        \
    fill_missing<T>(args + 2, 3);                                                          \
    for_each<T, T, T, T, T>(d, args, [](T& dst, T g, [[maybe_unused]] T a,                 \
                                        [[maybe_unused]] T b, [[maybe_unused]] T y) {      \
      put<kAcc>(dst, g * (dfa));                                                           \
    });                                                                                    \
  }                                                                                        \
  template <class T, bool kAcc>                                                            \
  void deriv_##name##_b(const LoopDims& d, const LoopArg* in_args) {                       \
    LoopArg args[5] = {in_args[0], in_args[1], in_args[2], in_args[3], in_args[4]};        \
    fill_missing<T>(args + 2, 3);                                                          \
    for_each<T, T, T, T, T>(d, args, [](T& dst, T g, [[maybe_unused]] T a,                 \
                                        [[maybe_unused]] T b, [[maybe_unused]] T y) {      \
      put<kAcc>(dst, g * (dfb));                                                           \
    });                                                                                    \
  }
#include "tenax/core/ops/elementwise.def"

template <class T, bool kAcc>
void deriv_one(const LoopDims& d, const LoopArg* args) {
  for_each<T, T>(d, args, [](T& dst, T g) { put<kAcc>(dst, g); });
}
template <class T, bool kAcc>
void deriv_argmax_mask(const LoopDims& d, const LoopArg* args) {
  for_each<T, T, T, T>(d, args, [](T& dst, T g, T x, T y) { put<kAcc>(dst, x == y ? g : T(0)); });
}
template <class T, bool kAcc>
void deriv_softmax(const LoopDims& d, const LoopArg* args) {
  for_each<T, T, T, T>(d, args, [](T& dst, T g, T x, T y) { put<kAcc>(dst, g * exp(x - y)); });
}

// Both modes of one reverse rule into the table.
#define TENAX_DERIV_ENTRY(t, op, fn)                          \
  do {                                                        \
    (t).deriv_acc[int(op)][0] = fn<double, true>;             \
    (t).deriv_acc[int(op)][1] = fn<float, true>;              \
    (t).deriv_set[int(op)][0] = fn<double, false>;            \
    (t).deriv_set[int(op)][1] = fn<float, false>;             \
  } while (false)

}  // namespace

void register_elementwise(detail::KernelTable& t) {
  using detail::BinaryOp;
  using detail::DerivOp;
  using detail::UnaryOp;
#define TENAX_UNARY(name, f, df, saves)                                 \
  t.unary[int(UnaryOp::name)][0] = unary_##name<double>;                \
  t.unary[int(UnaryOp::name)][1] = unary_##name<float>;                 \
  TENAX_DERIV_ENTRY(t, DerivOp::unary_##name, deriv_unary_##name);
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)                    \
  t.binary[int(BinaryOp::name)][0] = binary_##name<double>;       \
  t.binary[int(BinaryOp::name)][1] = binary_##name<float>;        \
  TENAX_DERIV_ENTRY(t, DerivOp::name##_a, deriv_##name##_a);      \
  TENAX_DERIV_ENTRY(t, DerivOp::name##_b, deriv_##name##_b);
#include "tenax/core/ops/elementwise.def"
  TENAX_DERIV_ENTRY(t, DerivOp::one, deriv_one);
  TENAX_DERIV_ENTRY(t, DerivOp::argmax_mask, deriv_argmax_mask);
  TENAX_DERIV_ENTRY(t, DerivOp::softmax, deriv_softmax);
}
#undef TENAX_DERIV_ENTRY

}  // namespace tenax::cpu
