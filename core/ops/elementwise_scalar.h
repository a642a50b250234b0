#pragma once
// Library-internal: the forward expressions of core/ops/elementwise.def as scalar functions,
// fwd_<op>(x) and fwd_<op>(a, b), for code that runs an op's arithmetic inline (a replayed step's
// inline forms, core/ops/scalar_loop.h) rather than through a kernel: the same expression the
// kernels expand, so the same bits.
#include <cmath>

#include "tenax/core/ops/vmath.h"

namespace tenax::detail::elementwise_scalar {

using vmath::exp;
using vmath::fabs;
using vmath::log;
using vmath::log1p;
using vmath::pow;
using vmath::sqrt;
using vmath::tanh;

#define TENAX_UNARY(id, f, df, saves_) \
  template <class T>                   \
  inline T fwd_##id(T x) {             \
    return (f);                        \
  }
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(id, f, dfa, dfb, saves_) \
  template <class T>                          \
  inline T fwd_##id(T a, T b) {               \
    return (f);                               \
  }
#include "tenax/core/ops/elementwise.def"

}  // namespace tenax::detail::elementwise_scalar
