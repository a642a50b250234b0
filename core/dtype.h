#pragma once
// Element types. float64 is the default everywhere; nothing downcasts silently.
#include <cstddef>
#include <cstdint>

namespace tenax {

/// Element type of a tensor.
enum class DType : uint8_t { f64, f32, i64, b8 };

/// Bytes per element.
constexpr std::size_t itemsize(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::i64: return 8;
    case DType::b8: return 1;
  }
  return 0;
}

/// "float64", "float32", "int64", "bool".
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "float64";
    case DType::f32: return "float32";
    case DType::i64: return "int64";
    case DType::b8: return "bool";
  }
  return "?";
}

/// True for float64 and float32.
constexpr bool is_floating(DType t) { return t == DType::f64 || t == DType::f32; }

/// The DType of a C++ element type.
template <class T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };

}  // namespace tenax
