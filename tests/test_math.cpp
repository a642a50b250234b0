// The host's transcendental functions (core/ops/vmath.h): within 2 ulp of libm over their ranges,
// and one definition — an op's vector loop, its scalar tail, a strided loop and the inline form of a
// replayed step give the same bits.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tenax/core/ops/elementwise_scalar.h"
#include "tenax/core/ops/vmath.h"
#include "tenax/tenax.h"

namespace tenax {
namespace {

// |a - b| in units of the last place of b.
template <class T>
double ulps(T a, T b) {
  if (a == b) return 0.0;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::infinity();
  const T step = std::nextafter(std::fabs(b), std::numeric_limits<T>::infinity()) - std::fabs(b);
  return std::fabs(double(a) - double(b)) / double(step);
}

template <class T, class F, class G>
double worst_ulps(double lo, double hi, F ours, G libm) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(lo, hi);
  double worst = 0.0;
  for (int k = 0; k < 200000; ++k) {
    const T x = T(u(rng));
    worst = std::max(worst, ulps<T>(ours(x), libm(x)));
  }
  return worst;
}

template <class T>
void expect_within_two_ulps() {
  const bool f32 = std::is_same_v<T, float>;
  const double big = f32 ? 80.0 : 700.0;
  EXPECT_LE(worst_ulps<T>(-big, big, [](T x) { return vmath::exp(x); }, [](T x) { return std::exp(x); }), 2.0);
  EXPECT_LE(worst_ulps<T>(1e-30, 1e30, [](T x) { return vmath::log(x); }, [](T x) { return std::log(x); }), 2.0);
  EXPECT_LE(worst_ulps<T>(1e-6, 2.0, [](T x) { return vmath::log(x); }, [](T x) { return std::log(x); }), 2.0);
  EXPECT_LE(worst_ulps<T>(-0.99, 100.0, [](T x) { return vmath::log1p(x); }, [](T x) { return std::log1p(x); }), 2.0);
  EXPECT_LE(worst_ulps<T>(-1e-3, 1e-3, [](T x) { return vmath::log1p(x); }, [](T x) { return std::log1p(x); }), 2.0);
  EXPECT_LE(worst_ulps<T>(-20.0, 20.0, [](T x) { return vmath::tanh(x); }, [](T x) { return std::tanh(x); }), 2.0);
  EXPECT_LE(worst_ulps<T>(-1e-3, 1e-3, [](T x) { return vmath::tanh(x); }, [](T x) { return std::tanh(x); }), 2.0);
  // The edges: limits and special values as libm has them.
  EXPECT_EQ(vmath::exp(T(-1000)), T(0));
  EXPECT_EQ(vmath::exp(T(1000)), std::numeric_limits<T>::infinity());
  EXPECT_EQ(vmath::log(T(0)), -std::numeric_limits<T>::infinity());
  EXPECT_TRUE(std::isnan(vmath::log(T(-1))));
  EXPECT_EQ(vmath::log1p(T(-1)), -std::numeric_limits<T>::infinity());
  EXPECT_EQ(vmath::tanh(T(50)), T(1));
  EXPECT_EQ(vmath::tanh(T(-50)), T(-1));
  EXPECT_TRUE(std::isnan(vmath::exp(std::numeric_limits<T>::quiet_NaN())));
}

TEST(Math, WithinTwoUlpsOfLibmFloat64) { expect_within_two_ulps<double>(); }
TEST(Math, WithinTwoUlpsOfLibmFloat32) { expect_within_two_ulps<float>(); }

// Special values through the vector loops (a contiguous run) and the scalar functions: the limits
// libm gives, NaN kept, and no undefined behaviour on the way (the sanitizer build runs this; the
// fuzzer found a float64 tanh of NaN converting NaN to an integer inside xsimd).
TEST(Math, SpecialValuesKeepTheirMeaningOnEveryPath) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v = {nan, inf, -inf, 1e300, -1e300, 1e-300, -1e-300, 0.0, -0.0, 700.0, -700.0, 40.0};
  for (const DType dt : {DType::f64, DType::f32}) {
    const Tensor x = astype(tensor(v, Axes{{"i", int64_t(v.size())}}), dt);
    const std::vector<double> th = tanh(x).to_vector(), ex = exp(x).to_vector(), sg = sigmoid(x).to_vector(),
                              sp = softplus(x).to_vector();
    EXPECT_TRUE(std::isnan(th[0]) && std::isnan(ex[0]) && std::isnan(sg[0]) && std::isnan(sp[0])) << dtype_name(dt);
    EXPECT_EQ(th[1], 1.0);
    EXPECT_EQ(th[2], -1.0);
    EXPECT_EQ(th[3], 1.0);
    EXPECT_EQ(th[4], -1.0);
    EXPECT_EQ(th[11], 1.0);
    EXPECT_EQ(ex[1], inf);
    EXPECT_EQ(ex[2], 0.0);
    EXPECT_EQ(sg[1], 1.0);
    EXPECT_EQ(sg[2], 0.0);
    EXPECT_EQ(sp[1], inf);
    EXPECT_EQ(sp[2], 0.0);
    EXPECT_EQ(th[7], 0.0);
    for (size_t k = 0; k < v.size(); ++k) {  // the same bits as the scalar functions
      if (dt == DType::f64) {
        EXPECT_TRUE(th[k] == vmath::tanh(v[k]) || (std::isnan(th[k]) && std::isnan(v[k]))) << k;
      } else {
        const float f = float(v[k]), t = vmath::tanh(f);
        EXPECT_TRUE(float(th[k]) == t || (std::isnan(th[k]) && std::isnan(f))) << k;
      }
    }
  }
}

// Every unary op with a transcendental form, both dtypes: the kernel over a contiguous tensor
// (vector loop and a tail: the AVX2 build's vectors where the CPU has them, test_math_baseline
// the baseline's), over a transposed view (the strided scalar loop) and element by element
// through the inline forms are the same bits; values in about (-20, 20), then over magnitudes
// from 1e-30 to 1e30 with both signs.
TEST(Math, AnOpGivesTheSameBitsOnEveryPath) {
  using namespace detail::elementwise_scalar;
  const Tensor narrow = 6.0 * randn(Axes{{"i", 17}, {"j", 59}}, 4);  // 1003 values
  const Tensor r = randn(Axes{{"i", 17}, {"j", 59}}, 5);
  const Tensor wide = div(r, abs(r)) * exp(uniform(Axes{{"i", 17}, {"j", 59}}, 6, -69.0, 69.0));
  for (const Tensor& base : {narrow, wide})
  for (const DType dt : {DType::f64, DType::f32}) {
    const Tensor x = astype(base, dt);
    const Tensor xt = transpose(x, {"j", "i"});  // the same values, strided
    const std::vector<double> xs = x.to_vector();
    struct Case {
      const char* name;
      Tensor (*op)(const Tensor&);
      double (*f64)(double);
      float (*f32)(float);
    };
    const Case cases[] = {
        {"exp", [](const Tensor& t) { return exp(t); }, &fwd_exp<double>, &fwd_exp<float>},
        {"log", [](const Tensor& t) { return log(abs(t) + 1e-3); }, nullptr, nullptr},
        {"tanh", [](const Tensor& t) { return tanh(t); }, &fwd_tanh<double>, &fwd_tanh<float>},
        {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, &fwd_sigmoid<double>, &fwd_sigmoid<float>},
        {"softplus", [](const Tensor& t) { return softplus(t); }, &fwd_softplus<double>, &fwd_softplus<float>},
        {"log1p", [](const Tensor& t) { return log1p(abs(t)); }, nullptr, nullptr},
    };
    for (const Case& c : cases) {
      const std::vector<double> dense = c.op(x).to_vector(AxisList{"i", "j"});
      const std::vector<double> strided = c.op(xt).to_vector(AxisList{"i", "j"});
      for (size_t k = 0; k < dense.size(); ++k)
        ASSERT_TRUE(dense[k] == strided[k] || (std::isnan(dense[k]) && std::isnan(strided[k])))
            << c.name << " " << dtype_name(dt) << " element " << k;
      if (!c.f64) continue;
      for (size_t k = 0; k < xs.size(); ++k) {
        const double one = dt == DType::f64 ? c.f64(xs[k]) : double(c.f32(float(xs[k])));
        ASSERT_TRUE(dense[k] == one || (std::isnan(dense[k]) && std::isnan(one)))
            << c.name << " " << dtype_name(dt) << " element " << k << " of " << xs[k];
      }
    }
  }
}

}  // namespace
}  // namespace tenax
