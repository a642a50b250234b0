#pragma once
// Making tensors: from C++ containers with axis names, constants, and seeded random fills. Every
// creation function takes the device last (default: the host); values made on the host (from C++
// containers, random draws) are copied there, so a seed gives the same values on every device.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

/// Uninitialised contiguous tensor.
Tensor empty(const Axes& axes, DType dtype = DType::f64, Device device = Device::cpu());
/// All zeros.
Tensor zeros(const Axes& axes, DType dtype = DType::f64, Device device = Device::cpu());
/// All ones.
Tensor ones(const Axes& axes, DType dtype = DType::f64, Device device = Device::cpu());
/// Every element `value`.
Tensor full(const Axes& axes, double value, DType dtype = DType::f64, Device device = Device::cpu());
/// Every element the complex `value` (dtype complex128 or complex64).
Tensor full(const Axes& axes, std::complex<double> value, DType dtype = DType::c128, Device device = Device::cpu());
/// A rank-0 tensor.
Tensor scalar(double value, DType dtype = DType::f64, Device device = Device::cpu());
/// A rank-0 complex tensor (complex128 unless `dtype` says complex64).
Tensor scalar(std::complex<double> value, DType dtype = DType::c128, Device device = Device::cpu());
/// Copies `values` (row-major over `axes`) into a new float64 tensor; throws ShapeError when the
/// count differs from the product of the sizes.
Tensor tensor(const std::vector<double>& values, const Axes& axes, Device device = Device::cpu());
/// Copies float32 `values` into a new float32 tensor.
Tensor tensor(const std::vector<float>& values, const Axes& axes, Device device = Device::cpu());
/// Copies complex `values` into a new complex128 (complex64) tensor.
Tensor tensor(const std::vector<std::complex<double>>& values, const Axes& axes, Device device = Device::cpu());
Tensor tensor(const std::vector<std::complex<float>>& values, const Axes& axes, Device device = Device::cpu());
/// A braced list of float64 values over `axes` (`tensor({x}, Axes{{"i", 1}})`: without this
/// overload one value is ambiguous between the two vectors).
Tensor tensor(std::initializer_list<double> values, const Axes& axes, Device device = Device::cpu());
/// A 1-D float64 tensor along `axis`.
Tensor tensor(std::initializer_list<double> values, Name axis, Device device = Device::cpu());
/// A 2-D float64 tensor from rows: axes (row, col). Throws ShapeError on ragged rows.
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, Name row, Name col,
              Device device = Device::cpu());
/// Standard normal samples from a seeded generator (same seed and standard library, same values).
/// Complex dtypes draw the real and imaginary parts of each element in turn, each N(0, 1).
Tensor randn(const Axes& axes, uint64_t seed, DType dtype = DType::f64, Device device = Device::cpu());
/// Uniform samples in [lo, hi) from a seeded generator (complex: each part in [lo, hi)).
Tensor uniform(const Axes& axes, uint64_t seed, double lo = 0.0, double hi = 1.0, DType dtype = DType::f64,
               Device device = Device::cpu());
/// 0, 1, ..., n-1 along `axis`.
Tensor arange(Name axis, int64_t n, DType dtype = DType::f64, Device device = Device::cpu());

}  // namespace tenax
