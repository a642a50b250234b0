#pragma once
// Library-internal: products of real or complex numbers for the CPU kernels. Complex ones by the
// textbook formula, as NumPy, JAX and PyTorch compute them: std::complex's operator* follows C's
// Annex G (a NaN check and a library call per product), which keeps the loops scalar. The two
// differ only where both parts of the textbook product are NaN (docs/complex.md).
#include <complex>
#include <type_traits>

namespace tenax::cpu {

/// a b
template <class T>
inline T prod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    return T(a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real());
  }
}

/// a conj(b) (a b for real numbers)
template <class T>
inline T prod_conj(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    return T(a.real() * b.real() + a.imag() * b.imag(), a.imag() * b.real() - a.real() * b.imag());
  }
}

}  // namespace tenax::cpu
