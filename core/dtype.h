#pragma once
// Element types. float64 is the default everywhere; nothing downcasts silently.
#include <complex>
#include <cstddef>
#include <cstdint>

namespace tenax {

/// Element type of a tensor.
/// complex128 and complex64 are pairs of float64 / float32 (real part first, as std::complex).
enum class DType : uint8_t { f64, f32, i64, b8, c128, c64 };

/// Bytes per element.
constexpr std::size_t itemsize(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::i64: return 8;
    case DType::b8: return 1;
    case DType::c128: return 16;
    case DType::c64: return 8;
  }
  return 0;
}

/// "float64", "float32", "int64", "bool", "complex128", "complex64".
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "float64";
    case DType::f32: return "float32";
    case DType::i64: return "int64";
    case DType::b8: return "bool";
    case DType::c128: return "complex128";
    case DType::c64: return "complex64";
  }
  return "?";
}

/// True for float64 and float32.
constexpr bool is_floating(DType t) { return t == DType::f64 || t == DType::f32; }
/// True for complex128 and complex64.
constexpr bool is_complex(DType t) { return t == DType::c128 || t == DType::c64; }
/// True for the four floating-point dtypes, real or complex.
constexpr bool is_inexact(DType t) { return is_floating(t) || is_complex(t); }
/// The real dtype of a complex one's parts (complex128 -> float64); a real dtype itself.
constexpr DType real_dtype(DType t) {
  return t == DType::c128 ? DType::f64 : t == DType::c64 ? DType::f32 : t;
}
/// The complex dtype with parts of a real one (float64 -> complex128); a complex dtype itself.
constexpr DType complex_dtype(DType t) {
  return t == DType::f64 ? DType::c128 : t == DType::f32 ? DType::c64 : t;
}

/// The DType of a C++ element type.
template <class T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };
template <> struct dtype_of<std::complex<double>> { static constexpr DType value = DType::c128; };
template <> struct dtype_of<std::complex<float>> { static constexpr DType value = DType::c64; };

}  // namespace tenax
