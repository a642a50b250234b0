// Parameter constraints: forward maps with tenax ops, inverses on the host.
#include "tenax/model/constraint.h"

#include <cmath>
#include <sstream>

#include "tenax/core/creation.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/transfer.h"

namespace tenax::model_detail {
namespace {

// Row-major (row, col) masks: the identity and the strict lower triangle, on `device`.
Tensor square_mask(int64_t n, Name row, Name col, bool diagonal, DType dtype, Device device) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c)
      if (diagonal ? r == c : c < r) v[static_cast<size_t>(r * n + c)] = 1.0;
  Tensor t = tensor(v, Axes{{row, n}, {col, n}});
  return to(dtype == DType::f64 ? t : astype(t, dtype), device);
}

Tensor like(const std::vector<double>& v, const Tensor& ref, const Axes& axes) {
  Tensor t = tensor(v, axes);
  return ref.dtype() == DType::f64 ? t : astype(t, ref.dtype());
}

[[noreturn]] void violated(const std::string& pointer, const Constraint& c, const std::string& what) {
  throw ModelError(pointer + ": the value violates its constraint " + describe(c) + ": " + what);
}

}  // namespace

std::string describe(const Constraint& c) {
  std::ostringstream s;
  switch (c.kind) {
    case ConstraintKind::none: return "unconstrained";
    case ConstraintKind::softplus: return "positive (softplus)";
    case ConstraintKind::exp: return "positive (exp)";
    case ConstraintKind::interval: s << "interval (" << c.lower << ", " << c.upper << ")"; return s.str();
    case ConstraintKind::spd: return "spd over (" + c.row.str() + ", " + c.col.str() + ")";
  }
  return "?";
}

Tensor constrain(const Constraint& c, const Tensor& u) {
  switch (c.kind) {
    case ConstraintKind::none: return u;
    case ConstraintKind::softplus: return softplus(u);
    case ConstraintKind::exp: return exp(u);
    case ConstraintKind::interval: return c.lower + (c.upper - c.lower) * sigmoid(u);
    case ConstraintKind::spd: {
      const int64_t n = u.size(c.row);
      Tensor l = u * square_mask(n, c.row, c.col, false, u.dtype(), u.device()) +
                 exp(u) * square_mask(n, c.row, c.col, true, u.dtype(), u.device());
      // value[r, c] = Σ_k L[r, k] L[c, k]
      const Name k("tenax_spd_k");
      Tensor a = rename(l, c.col, k);
      Tensor b = rename(l, AxisList{c.row, c.col}, AxisList{c.col, k});
      return dot(a, b, {k});
    }
  }
  return u;
}

namespace {

// The constrained value of one coordinate in T's arithmetic, and whether it is inside.
template <typename T>
bool inside(const Constraint& c, double u, double& value) {
  const T x = static_cast<T>(u);
  switch (c.kind) {
    case ConstraintKind::softplus: {
      const T v = x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
      value = double(v);
      return v > T(0) && std::isfinite(v);
    }
    case ConstraintKind::exp: {
      const T v = std::exp(x);
      value = double(v);
      return v > T(0) && std::isfinite(v);
    }
    case ConstraintKind::interval: {
      const T s = x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
      const T v = T(c.lower) + (T(c.upper) - T(c.lower)) * s;
      value = double(v);
      return v > T(c.lower) && v < T(c.upper);
    }
    default: value = u; return true;
  }
}

}  // namespace

void check_representable(const Constraint& c, const std::vector<double>& u, DType dtype, const std::string& pointer) {
  if (c.kind == ConstraintKind::none || c.kind == ConstraintKind::spd) return;
  for (size_t k = 0; k < u.size(); ++k) {
    double value = 0.0;
    if (dtype == DType::f32 ? inside<float>(c, u[k], value) : inside<double>(c, u[k], value)) continue;
    std::ostringstream s;
    s << pointer << ": unconstrained coordinate " << k << " = " << u[k] << " maps to " << value << " under the "
      << describe(c) << " constraint, which " << dtype_name(dtype) << " cannot hold inside it";
    throw NumericError(s.str());
  }
}

Tensor unconstrain(const Constraint& c, const Tensor& value, const std::string& pointer) {
  if (is_complex(value.dtype())) {  // complex parameters take no constraint (the parser checks)
    for (const std::complex<double>& z : value.to_complex_vector())
      if (!std::isfinite(z.real()) || !std::isfinite(z.imag())) violated(pointer, c, "it holds a non-finite number");
    return value;
  }
  std::vector<double> v = value.to_vector();
  for (double x : v)
    if (!std::isfinite(x)) violated(pointer, c, "it holds a non-finite number");
  switch (c.kind) {
    case ConstraintKind::none: return value;
    case ConstraintKind::softplus:
    case ConstraintKind::exp:
      for (double& x : v) {
        if (!(x > 0.0)) violated(pointer, c, "it holds " + std::to_string(x) + ", not > 0");
        // softplus⁻¹(x) = log(expm1(x)) = x + log(-expm1(-x)), stable for large and small x
        x = c.kind == ConstraintKind::exp ? std::log(x) : x + std::log(-std::expm1(-x));
      }
      return like(v, value, value.axes());
    case ConstraintKind::interval:
      for (double& x : v) {
        if (!(x > c.lower && x < c.upper))
          violated(pointer, c, "it holds " + std::to_string(x) + ", outside the open interval");
        x = std::log((x - c.lower) / (c.upper - x));
      }
      return like(v, value, value.axes());
    case ConstraintKind::spd: {
      const int64_t n = value.size(c.row);
      std::vector<double> a = value.to_vector(AxisList{c.row, c.col});
      for (int64_t r = 0; r < n; ++r)
        for (int64_t q = 0; q < r; ++q) {
          const double x = a[size_t(r * n + q)], y = a[size_t(q * n + r)];
          if (std::abs(x - y) > 1e-12 * (std::abs(x) + std::abs(y)) + 1e-300)
            violated(pointer, c, "it is not symmetric");
        }
      // u holds the strict lower part of the Cholesky factor and the log of its diagonal.
      std::vector<double> l;
      try {
        l = cholesky(value, c.row, c.col).to_vector(AxisList{c.row, c.col});
      } catch (const NumericError&) {
        violated(pointer, c, "it is not positive definite");
      }
      for (int64_t j = 0; j < n; ++j) l[size_t(j * n + j)] = std::log(l[size_t(j * n + j)]);
      return like(l, value, Axes{{c.row, n}, {c.col, n}});
    }
  }
  return value;
}

}  // namespace tenax::model_detail
