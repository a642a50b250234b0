#pragma once
// Library-internal: the vector forms of the unary ops over xsimd batches (vmath::Batch: the
// including file's instruction set), where vmath defines the op's function by vectors: loop.h's
// contiguous loops run them a batch at a time, and each lane has the scalar form's bits.
// elementwise.cpp includes this for the build's baseline and unary_avx2.cpp for AVX2; in an
// anonymous namespace on purpose: each including file gets its own copy, built with its own flags,
// and shares no symbol of it.
#include "tenax/backends/kernels.h"
#include "tenax/core/ops/vmath.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set, see above

using detail::UnaryOp;

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

}  // namespace
}  // namespace tenax::cpu
