#pragma once
// Library-internal: the transcendental functions of the elementwise ops (core/ops/elementwise.def)
// on the host, one definition for every path that computes them — the kernels' vector loops, their
// scalar tails and flat twins, and the inline forms of replayed steps — so that an op gives the same
// bits however it runs.
//
// Where xsimd's vector functions beat libm on this build's vectors (SSE2 on x86-64: 2 doubles, 4
// floats; measured per element on 2^20 values; the AVX2 build of the kernels' rows, unary_avx2.cpp,
// computes the same lanes 4 / 8 at a time), they are the definition: every float32 function,
// and tanh for float64 (1.5x; exp, log and log1p in float64 are no faster than libm's and stay
// libm's). A scalar is computed as one lane of a vector, so it has a vector lane's bits. xsimd's
// functions are within 2 ulp of libm's (tests/test_math.cpp checks the ranges).
#include <cmath>
#include <type_traits>
#include <utility>

#include <xsimd/xsimd.hpp>

namespace tenax::vmath {

template <class T>
using Batch = xsimd::batch<T>;

/// Whether the function `f` of T runs through xsimd (the vector loops take it).
template <class T>
inline constexpr bool kVectorTanh = true;
template <class T>
inline constexpr bool kVectorExpLog = std::is_same_v<T, float>;

template <class T>
inline T lane(const Batch<T>& b) {
  return b.get(0);
}

// Each lane through libm's scalar function (the definition where xsimd's is not faster). Built
// from the lanes' values, not through a stored array: two scalar stores read back as one vector
// stall store forwarding (measured 6.9 against 3.7 ns per element for float64 sigmoid).
template <class T, class F, std::size_t... I>
inline Batch<T> per_lane(const Batch<T>& x, F f, std::index_sequence<I...>) {
  return Batch<T>{f(x.get(I))...};
}
template <class T, class F>
inline Batch<T> per_lane(const Batch<T>& x, F f) {
  return per_lane(x, f, std::make_index_sequence<Batch<T>::size>{});
}

// ---- vectors: xsimd's where it is the definition, else libm's per lane (same bits as scalars) ----
template <class T>
inline Batch<T> exp(const Batch<T>& x) {
  if constexpr (kVectorExpLog<T>) return xsimd::exp(x);
  else return per_lane(x, [](T v) { return std::exp(v); });
}
template <class T>
inline Batch<T> log(const Batch<T>& x) {
  if constexpr (kVectorExpLog<T>) return xsimd::log(x);
  else return per_lane(x, [](T v) { return std::log(v); });
}
template <class T>
inline Batch<T> log1p(const Batch<T>& x) {
  if constexpr (kVectorExpLog<T>) return xsimd::log1p(x);
  else return per_lane(x, [](T v) { return std::log1p(v); });
}
// xsimd's float64 functions on SSE2 convert to int64 lane by lane in C++, which is undefined for
// NaN and out-of-range values (UBSan found it): tanh's argument is read as 0 where it is NaN and
// clamped to +-20 (where tanh is +-1 in float64), the NaN restored after. float32 converts with
// cvttps2dq, defined for every input.
template <class T>
inline Batch<T> tanh(const Batch<T>& x) {
  if constexpr (std::is_same_v<T, double>) {
    const auto nan = xsimd::isnan(x);  // not x != x: AVX compares it ordered (false for NaN)
    const Batch<T> safe = xsimd::min(xsimd::max(xsimd::select(nan, Batch<T>(T(0)), x), Batch<T>(T(-20))), Batch<T>(T(20)));
    return xsimd::select(nan, x, xsimd::tanh(safe));
  } else {
    return xsimd::tanh(x);
  }
}

// ---- scalars: one lane of the vector function where it is the definition, else libm ----
inline float exp(float x) { return lane(exp(Batch<float>(x))); }
inline float log(float x) { return lane(log(Batch<float>(x))); }
inline float log1p(float x) { return lane(log1p(Batch<float>(x))); }
inline float tanh(float x) { return lane(tanh(Batch<float>(x))); }
inline double exp(double x) { return std::exp(x); }
inline double log(double x) { return std::log(x); }
inline double log1p(double x) { return std::log1p(x); }
inline double tanh(double x) { return lane(tanh(Batch<double>(x))); }

using std::fabs;
using std::pow;
using std::sqrt;

}  // namespace tenax::vmath
