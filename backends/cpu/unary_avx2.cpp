// The unary ops with a vector form (unary_forms.h) over 256-bit vectors (avx2.h): 8 floats or 4
// doubles per call of the same xsimd functions the baseline runs on 4 / 2. Compiled with -mavx2
// and contraction off, no FMA: xsimd then evaluates every step as the baseline does, so each lane
// has the baseline lane's bits (tests/test_math.cpp checks it). Only the entry points are external.
#include "tenax/backends/cpu/avx2.h"
#include "tenax/backends/cpu/unary_forms.h"

#if !defined(__AVX2__) || defined(__FMA__)
#error "unary_avx2.cpp must be compiled with -mavx2 and without -mfma"
#endif

namespace tenax::cpu {
namespace {

template <UnaryOp op, class T>
int64_t rows(int64_t n, T* y, const T* x) {
  using B = vmath::Batch<T>;
  constexpr auto w = static_cast<int64_t>(B::size);
  int64_t i = 0;
  if constexpr (VectorForm<op, T>::kHas)
    for (; i + w <= n; i += w) VectorForm<op, T>::apply(B::load_unaligned(x + i)).store_unaligned(y + i);
  return i;
}

template <class T>
int64_t dispatch(UnaryOp op, int64_t n, T* y, const T* x) {
  switch (op) {
    case UnaryOp::tanh: return rows<UnaryOp::tanh>(n, y, x);
    case UnaryOp::exp: return rows<UnaryOp::exp>(n, y, x);
    case UnaryOp::log: return rows<UnaryOp::log>(n, y, x);
    case UnaryOp::log1p: return rows<UnaryOp::log1p>(n, y, x);
    case UnaryOp::sigmoid: return rows<UnaryOp::sigmoid>(n, y, x);
    case UnaryOp::softplus: return rows<UnaryOp::softplus>(n, y, x);
    default: return 0;
  }
}

}  // namespace

int64_t unary_avx2(detail::UnaryOp op, int64_t n, float* y, const float* x) { return dispatch(op, n, y, x); }
int64_t unary_avx2(detail::UnaryOp op, int64_t n, double* y, const double* x) { return dispatch(op, n, y, x); }

}  // namespace tenax::cpu
