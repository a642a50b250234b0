// Tensor factories.
#include "tenax/core/creation.h"

#include <cstring>
#include <random>
#include <type_traits>

#include "tenax/core/ops.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/transfer.h"

namespace tenax {
namespace {

// Row-major strides of `axes`; returns the element count (Axes keeps it within kMaxElements).
int64_t contiguous_strides(const Axes& axes, int64_t* strides) {
  int64_t s = 1;
  for (int i = axes.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= axes.size(i);
  }
  return s;
}

template <class T>
Tensor from_values(const std::vector<T>& values, const Axes& axes) {
  if (static_cast<int64_t>(values.size()) != axes.numel())
    throw ShapeError("[tensor] " + std::to_string(values.size()) + " values do not fill axes " +
                     axes.describe() + " (" + std::to_string(axes.numel()) + " elements)");
  Tensor t = empty(axes, dtype_of<T>::value);
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace

Tensor empty(const Axes& axes, DType dtype, Device device) {
  int64_t strides[kMaxRank];
  const int64_t n = contiguous_strides(axes, strides);
  StoragePtr s(Storage::allocate(static_cast<std::size_t>(n) * itemsize(dtype), device));
  return detail::TensorAccess::fresh(std::move(s), axes, strides, dtype);
}

Tensor full(const Axes& axes, double value, DType dtype, Device device) {
  Tensor t = empty(axes, dtype, device);
  if (dtype == DType::i64 || dtype == DType::b8) {
    if (device.kind != Device::Kind::cpu) throw DeviceError("[full] integer fills are host-only for now");
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (dtype == DType::i64) static_cast<int64_t*>(t.data_ptr())[i] = static_cast<int64_t>(value);
      else static_cast<bool*>(t.data_ptr())[i] = value != 0.0;
    }
    return t;
  }
  // All-bits-zero is 0.0 in IEEE 754. A kernel capture must see the fill to replay it.
  if (value == 0.0 && device.kind == Device::Kind::cpu && !detail::g_capture) {
    std::memset(t.data_ptr(), 0, static_cast<std::size_t>(t.numel()) * itemsize(dtype));
    return t;
  }
  const detail::KernelTable& k = detail::kernels(device);
  detail::LoopArg args[2] = {detail::loop_arg(t, axes), {}};
  args[1].data = &value;
  detail::need(k.fill[detail::numeric_index(dtype, "full")], "full", device)(detail::loop_dims(axes), args);
  return t;
}

Tensor full(const Axes& axes, std::complex<double> value, DType dtype, Device device) {
  if (!is_complex(dtype))
    throw DTypeError(std::string("[full] a complex value needs dtype complex128 or complex64, got ") + dtype_name(dtype));
  if (value.imag() == 0.0) return full(axes, value.real(), dtype, device);
  // (re, im) from two real fills: every device and a kernel capture see kernels only.
  const DType part = real_dtype(dtype);
  return complex(full(axes, value.real(), part, device), full(axes, value.imag(), part, device));
}

Tensor scalar(std::complex<double> value, DType dtype, Device device) { return full(Axes{}, value, dtype, device); }

Tensor zeros(const Axes& axes, DType dtype, Device device) { return full(axes, 0.0, dtype, device); }
Tensor ones(const Axes& axes, DType dtype, Device device) { return full(axes, 1.0, dtype, device); }
Tensor scalar(double value, DType dtype, Device device) { return full(Axes{}, value, dtype, device); }

namespace {
// A tensor made on the host, on `device`.
Tensor on(Tensor host, Device device) { return device.kind == Device::Kind::cpu ? host : to(host, device); }
}  // namespace

Tensor tensor(const std::vector<double>& values, const Axes& axes, Device device) {
  return on(from_values(values, axes), device);
}
Tensor tensor(const std::vector<float>& values, const Axes& axes, Device device) {
  return on(from_values(values, axes), device);
}

Tensor tensor(const std::vector<std::complex<double>>& values, const Axes& axes, Device device) {
  return on(from_values(values, axes), device);
}
Tensor tensor(const std::vector<std::complex<float>>& values, const Axes& axes, Device device) {
  return on(from_values(values, axes), device);
}

Tensor tensor(std::initializer_list<double> values, const Axes& axes, Device device) {
  return on(from_values(std::vector<double>(values), axes), device);
}

Tensor tensor(std::initializer_list<double> values, Name axis, Device device) {
  return on(from_values(std::vector<double>(values), Axes{{axis, static_cast<int64_t>(values.size())}}), device);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, Name row, Name col, Device device) {
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  const int64_t n_cols = n_rows ? static_cast<int64_t>(rows.begin()->size()) : 0;
  std::vector<double> v;
  v.reserve(static_cast<size_t>(n_rows * n_cols));
  int64_t r = 0;
  for (const auto& line : rows) {
    if (static_cast<int64_t>(line.size()) != n_cols)
      throw ShapeError("[tensor] row " + std::to_string(r) + " has " + std::to_string(line.size()) +
                       " values; row 0 has " + std::to_string(n_cols));
    v.insert(v.end(), line.begin(), line.end());
    ++r;
  }
  return on(from_values(v, Axes{{row, n_rows}, {col, n_cols}}), device);
}

namespace {
// Draws straight into the tensor (allocated, and so budgeted, first), in row-major order.
template <class T, class Dist>
void draw(Tensor& t, uint64_t seed, Dist dist) {
  std::mt19937_64 gen(seed);
  T* p = static_cast<T*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(dist(gen));
}

// A complex element takes two draws, real part first.
template <class C, class Dist>
void draw_complex(Tensor& t, uint64_t seed, Dist dist) {
  using R = typename C::value_type;
  std::mt19937_64 gen(seed);
  C* p = static_cast<C*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const R re = static_cast<R>(dist(gen));
    p[i] = C(re, static_cast<R>(dist(gen)));
  }
}

template <class Dist>
Tensor sample(const Axes& axes, uint64_t seed, DType dtype, Dist dist, const char* op) {
  if (!is_inexact(dtype))
    throw DTypeError(std::string("[") + op + "] needs float64, float32, complex128 or complex64, got " + dtype_name(dtype));
  Tensor t = empty(axes, dtype);
  switch (dtype) {
    case DType::f64: draw<double>(t, seed, dist); break;
    case DType::f32: draw<float>(t, seed, dist); break;
    case DType::c128: draw_complex<std::complex<double>>(t, seed, dist); break;
    default: draw_complex<std::complex<float>>(t, seed, dist); break;
  }
  return t;
}
}  // namespace

Tensor randn(const Axes& axes, uint64_t seed, DType dtype, Device device) {
  return on(sample(axes, seed, dtype, std::normal_distribution<double>(0.0, 1.0), "randn"), device);
}

Tensor uniform(const Axes& axes, uint64_t seed, double lo, double hi, DType dtype, Device device) {
  if (!(lo < hi)) throw Error("[uniform] needs lo < hi, got " + std::to_string(lo) + ", " + std::to_string(hi));
  return on(sample(axes, seed, dtype, std::uniform_real_distribution<double>(lo, hi), "uniform"), device);
}

Tensor arange(Name axis, int64_t n, DType dtype, Device device) {
  if (n < 0) throw ShapeError("[arange] needs a size >= 0 for axis '" + axis.str() + "', got " + std::to_string(n));
  if (dtype == DType::b8 || is_complex(dtype))
    throw DTypeError(std::string("[arange] needs float64, float32 or int64, got ") + dtype_name(dtype));
  Tensor t = empty(Axes{{axis, n}}, dtype);
  auto fill = [n](auto* p) {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<std::remove_pointer_t<decltype(p)>>(i);
  };
  if (dtype == DType::f64) fill(static_cast<double*>(t.data_ptr()));
  else if (dtype == DType::f32) fill(static_cast<float*>(t.data_ptr()));
  else fill(static_cast<int64_t*>(t.data_ptr()));
  return on(t, device);
}

}  // namespace tenax
