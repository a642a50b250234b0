#pragma once
// Library-internal: complex products over rows, y (+)= g d or g conj(d), in the AVX2 build's vectors
// where the CPU has them (avx2.h, complex_avx2.cpp), bitwise the scalar loop's textbook products
// (product.h). For the elementwise kernels (complex.cpp) and the contractions' axpy rows
// (contract.cpp), compiled for the baseline.
#include <complex>
#include <cstdint>
#include <type_traits>

#include "tenax/backends/cpu/avx2.h"

namespace tenax::cpu {

/// The first elements of a row whose output is contiguous and whose g and d are each contiguous
/// or one number (strides 1 or 0), n of them in all: how many it did (0 where the row does not
/// qualify or the AVX2 build does not run; the caller does the rest). `form`: kComplexAccumulate,
/// kComplexConjugate.
template <class C>
int64_t complex_product_rows(int64_t n, C* y, int64_t sy, const C* g, int64_t sg, const C* d, int64_t sd, int form) {
#if defined(TENAX_HAVE_AVX2_KERNELS)
  if (sy != 1 || (sg != 0 && sg != 1) || (sd != 0 && sd != 1) || n < 4 || !cpu_avx2()) return 0;
  using R = typename C::value_type;
  auto* yr = reinterpret_cast<R*>(y);
  const auto* gr = reinterpret_cast<const R*>(g);
  const auto* dr = reinterpret_cast<const R*>(d);
  if constexpr (std::is_same_v<R, double>) return complex_product_avx2(n, yr, gr, sg == 1, dr, sd == 1, form);
  else return complex_product_avx2_f32(n, yr, gr, sg == 1, dr, sd == 1, form);
#else
  (void)n, (void)y, (void)sy, (void)g, (void)sg, (void)d, (void)sd, (void)form;
  return 0;
#endif
}

}  // namespace tenax::cpu
