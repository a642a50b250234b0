// Helpers for the generic op tests.
#include "op_check.h"

#include <algorithm>
#include <cmath>
#include <complex>

namespace tenax::testing {

Tensor scramble(const Tensor& t, std::mt19937_64& rng) {
  if (t.rank() == 0 || !is_inexact(t.dtype())) return t;
  const AxisList names = t.axes().names();
  std::vector<Name> order(names.begin(), names.end());
  std::shuffle(order.begin(), order.end(), rng);
  Axes big;
  for (size_t k = 0; k < order.size(); ++k) {
    int64_t n = t.size(order[k]);
    big.push_back({order[k], k == 0 ? 2 * n : n});
  }
  Tensor buffer = zeros(big, t.dtype());
  Tensor view = slice(buffer, order[0], 0, 2 * t.size(order[0]), 2);
  detail::accumulate(view, t);
  return view;
}

double mismatch(const Tensor& a, const Tensor& b, double rtol, double atol) {
  EXPECT_TRUE(a.axes().same_set(b.axes())) << a.describe() << " vs " << b.describe();
  if (!a.axes().same_set(b.axes())) return 1e30;
  if (is_complex(a.dtype()) || is_complex(b.dtype())) {  // |difference| over |value|, as complex numbers
    const std::vector<std::complex<double>> ca = a.to_complex_vector(b.axes().names()), cb = b.to_complex_vector();
    double worst = 0;
    for (size_t i = 0; i < ca.size(); ++i) {
      const double e = std::abs(ca[i] - cb[i]) / (atol + rtol * std::abs(cb[i]));
      if (!(e <= worst)) worst = std::isnan(e) ? 1e30 : e;
    }
    return worst;
  }
  std::vector<double> va = a.to_vector(b.axes().names()), vb = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double e = std::fabs(va[i] - vb[i]) / (atol + rtol * std::fabs(vb[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? 1e30 : e;
  }
  return worst;
}

namespace {
int64_t offset_of(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int d = t.rank() - 1; d >= 0; --d) {
    off += (flat % t.axes().size(d)) * t.strides()[d];
    flat /= t.axes().size(d);
  }
  return off;
}
}  // namespace

void set_flat_complex(const Tensor& t, int64_t flat, std::complex<double> v) {
  if (t.dtype() == DType::c128) t.data<std::complex<double>>()[offset_of(t, flat)] = v;
  else if (t.dtype() == DType::c64) t.data<std::complex<float>>()[offset_of(t, flat)] = std::complex<float>(v);
  else set_flat(t, flat, v.real());
}

std::complex<double> get_flat_complex(const Tensor& t, int64_t flat) {
  if (t.dtype() == DType::c128) return t.data<std::complex<double>>()[offset_of(t, flat)];
  if (t.dtype() == DType::c64) return t.data<std::complex<float>>()[offset_of(t, flat)];
  return get_flat(t, flat);
}

void set_flat(const Tensor& t, int64_t flat, double v) {
  if (t.dtype() == DType::f64) t.data<double>()[offset_of(t, flat)] = v;
  else t.data<float>()[offset_of(t, flat)] = static_cast<float>(v);
}

double get_flat(const Tensor& t, int64_t flat) {
  if (t.dtype() == DType::f64) return t.data<double>()[offset_of(t, flat)];
  return t.data<float>()[offset_of(t, flat)];
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> nudged(const std::vector<Tensor>& args, size_t k, int64_t i,
                                                           double h) {
  std::vector<Tensor> p = args, m = args;
  p[k] = contiguous(args[k]);
  m[k] = contiguous(args[k]);
  const double x = get_flat(args[k], i);
  set_flat(p[k], i, x + h);
  set_flat(m[k], i, x - h);
  return {p, m};
}

}  // namespace tenax::testing
