// Random cases for the generic op tests.
#include "tenax/core/ops/sampling.h"

#include <algorithm>
#include <complex>

#include "tenax/core/ops.h"

namespace tenax::detail {

Axis pool_axis(int i) {
  static const Axis pool[kPoolSize] = {{"p", 3}, {"q", 2}, {"r", 4}, {"s", 1}};
  return pool[i];
}

Axes random_axes(SampleRng& rng, int k) {
  int idx[kPoolSize] = {0, 1, 2, 3};
  std::shuffle(idx, idx + kPoolSize, rng);
  Axes a;
  // Sizes are drawn per call (1..4); a sampler calls this once and takes subsets, so its operands agree.
  for (int i = 0; i < k && i < kPoolSize; ++i) a.push_back({pool_axis(idx[i]).name, 1 + int64_t(rng() % 4)});
  return a;
}

Axes random_subset(SampleRng& rng, const Axes& of) {
  Axes a;
  for (int i = 0; i < of.rank(); ++i)
    if (rng() & 1) a.push_back(of[i]);
  return a;
}

namespace {
// A complex sample: real parts `re` (of the real dtype), imaginary parts uniform in
// [-width/2, width/2) where width is the real parts' range.
Tensor with_imaginary(SampleRng& rng, const Tensor& re, double width) {
  return complex(re, uniform(re.axes(), rng(), -width / 2, width / 2, re.dtype()));
}
}  // namespace

Tensor random_values(SampleRng& rng, const Axes& axes, DType dtype, double lo, double hi) {
  if (is_complex(dtype)) return with_imaginary(rng, random_values(rng, axes, real_dtype(dtype), lo, hi), hi - lo);
  return uniform(axes, rng(), lo, hi, dtype);
}

Tensor random_signed(SampleRng& rng, const Axes& axes, DType dtype, double lo, double hi) {
  if (is_complex(dtype)) return with_imaginary(rng, random_signed(rng, axes, real_dtype(dtype), lo, hi), hi - lo);
  std::uniform_real_distribution<double> mag(lo, hi);
  std::vector<double> v(static_cast<size_t>(axes.numel()));
  for (double& x : v) x = (rng() & 1 ? 1.0 : -1.0) * mag(rng);
  if (dtype == DType::f64) return tensor(v, axes);
  return tensor(std::vector<float>(v.begin(), v.end()), axes);
}

Tensor random_spd(SampleRng& rng, Name row, Name col, int64_t n, const Axes& batch, DType dtype) {
  if (is_complex(dtype)) {  // Hermitian: A = n I + G G^H / n with G complex
    Axes axes = batch;
    axes.push_back({row, n});
    axes.push_back({col, n});
    std::normal_distribution<double> normal;
    std::vector<std::complex<double>> v(static_cast<size_t>(axes.numel()));
    std::vector<std::complex<double>> g(static_cast<size_t>(n * n));
    for (int64_t b = 0; b < batch.numel(); ++b) {
      for (auto& x : g) x = {normal(rng), normal(rng)};
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          std::complex<double> s = i == j ? double(n) : 0.0;
          for (int64_t k = 0; k < n; ++k) s += g[size_t(i * n + k)] * std::conj(g[size_t(j * n + k)]) / double(n);
          v[static_cast<size_t>(b * n * n + i * n + j)] = s;
        }
    }
    const Tensor t = tensor(v, axes);
    return dtype == DType::c128 ? t : astype(t, dtype);
  }
  Axes axes = batch;
  axes.push_back({row, n});
  axes.push_back({col, n});
  const int64_t count = batch.numel();
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<size_t>(axes.numel()));
  std::vector<double> g(static_cast<size_t>(n * n));
  for (int64_t b = 0; b < count; ++b) {
    for (double& x : g) x = normal(rng);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? double(n) : 0.0;
        for (int64_t k = 0; k < n; ++k) s += g[i * n + k] * g[j * n + k] / double(n);
        v[static_cast<size_t>(b * n * n + i * n + j)] = s;
      }
  }
  if (dtype == DType::f64) return tensor(v, axes);
  return tensor(std::vector<float>(v.begin(), v.end()), axes);
}

}  // namespace tenax::detail
