// The NaN/Inf debug checks: the switch, the scan/map position, and the check itself.
#include "tenax/core/check_finite.h"

#include <atomic>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "tenax/core/env.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {
namespace detail {
std::atomic<bool> g_check_finite{false};
}  // namespace detail

namespace {

// Reads TENAX_CHECK_FINITE once at start-up (the flag itself is constant-initialised to false). An
// invalid value leaves the checks off here; the first op raises its Error (validate_environment).
const bool g_from_environment = [] {
  bool on = false;
  try {
    on = detail::env_flag("TENAX_CHECK_FINITE").value_or(false);
  } catch (const Error&) {
  }
  if (on) detail::g_check_finite.store(true, std::memory_order_relaxed);
  return on;
}();

// Element k (logical row-major order) of t, through its strides: no copy, so nothing is recorded
// or captured while checking.
template <class T>
T element(const Tensor& t, int64_t k) {
  int64_t off = 0;
  for (int d = t.rank() - 1; d >= 0; --d) {
    const int64_t n = t.axes().size(d);
    off += (k % n) * t.strides()[d];
    k /= n;
  }
  return t.data<T>()[off];
}

// A complex number is finite when both parts are.
template <class T>
bool finite(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isfinite(v);
  else return std::isfinite(v.real()) && std::isfinite(v.imag());
}

template <class T>
int64_t first_bad(const Tensor& t) {
  const int64_t n = t.numel();
  if (t.is_contiguous()) {
    const T* p = t.data<T>();
    for (int64_t k = 0; k < n; ++k)
      if (!finite(p[k])) return k;
    return -1;
  }
  for (int64_t k = 0; k < n; ++k)
    if (!finite(element<T>(t, k))) return k;
  return -1;
}

// The non-finite part of element `index` (the real part first).
double bad_value(const Tensor& t, int64_t index) {
  switch (t.dtype()) {
    case DType::f64: return element<double>(t, index);
    case DType::f32: return element<float>(t, index);
    default: {
      const std::complex<double> v =
          t.dtype() == DType::c128 ? element<std::complex<double>>(t, index) : std::complex<double>(element<std::complex<float>>(t, index));
      return std::isfinite(v.real()) ? v.imag() : v.real();
    }
  }
}

}  // namespace

void set_check_finite(bool on) { detail::g_check_finite.store(on, std::memory_order_relaxed); }
bool check_finite() { return detail::check_finite_enabled(); }

namespace detail {

int64_t first_non_finite(const Tensor& t) {
  if (t.device().kind != Device::Kind::cpu) return -1;  // device checks land with the CUDA backend
  switch (t.dtype()) {
    case DType::f64: return first_bad<double>(t);
    case DType::f32: return first_bad<float>(t);
    case DType::c128: return first_bad<std::complex<double>>(t);
    case DType::c64: return first_bad<std::complex<float>>(t);
    default: return -1;
  }
}

std::string non_finite_message(const Tensor& t, int64_t index, const char* op, const std::string& where) {
  const double v = bad_value(t, index);
  const char* what = std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
  return std::string("[") + op + "] produced " + what + " at " + batch_index(t.axes(), index) + " of its " +
         t.axes().describe() + " " + where;
}

void check_finite_value(const Tensor& t, const char* op, const std::string& where) {
  const int64_t bad = first_non_finite(t);
  if (bad >= 0) {
    std::string msg = non_finite_message(t, bad, op, where);
    if (g_loop_position.what)
      msg += " at " + std::string(g_loop_position.what) + " " + std::to_string(g_loop_position.index);
    throw NumericError(msg + " (finite checks are on: set_check_finite / TENAX_CHECK_FINITE)");
  }
  // Inside a kernel capture (a scan step being compiled), replays repeat the check.
  if (g_capture) {
    g_capture->check(
        [t] { return first_non_finite(t); },
        [t, op = std::string(op), where](int64_t i) { return non_finite_message(t, i, op.c_str(), where); });
  }
}

}  // namespace detail
}  // namespace tenax
