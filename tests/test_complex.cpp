// Every op that takes complex operands (OpDef::complex), from its own sampler in complex128: the
// forward values against std::complex and the parts' references, the VJP against central finite
// differences in the real AND imaginary direction of every input element, the JVP against finite
// differences along complex tangents, float64 == complex128 on real inputs, nmap == the loop over
// slices, a compiled scan's replay and compile() against eager. Every other op raises a DTypeError
// naming it and the dtype. Then the convention (docs/complex.md) on closed forms, and a real
// optimiser (L-BFGS) fitting complex parameters through grad.
#include <Eigen/Core>
#include <LBFGS.h>

#include <array>
#include <cmath>
#include <complex>
#include <cstring>
#include <random>
#include <string>

#include "expect_message.h"
#include "tenax/backends/kernels.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"
#include "op_check.h"
#include "op_reference_values.h"

namespace tenax {
namespace {

using C = std::complex<double>;
using testing::get_flat_complex;
using testing::mismatch;
using testing::scramble;
using testing::set_flat_complex;

constexpr int kCases = 6;
constexpr double kStep = 1e-6;

Tensor run(const OpDef& op, const std::vector<Tensor>& in, const Attrs& a) { return detail::apply(op, in, a); }

bool differentiable(const OpDef& op, const Tensor& t, int i) {
  return is_inexact(t.dtype()) && !(i < 31 && (op.nondiff & (1u << i)));
}

// Random weights like y (complex for a complex y): the loss Σ Re(conj(w) y) seeds y's cotangent w.
Tensor weights_like(const Tensor& y, uint64_t seed) { return randn(y.axes(), seed, is_complex(y.dtype()) ? DType::c128 : DType::f64); }

// Σ Re(conj(w) y) computed here in C++ from the values (the finite differences' objective).
double weighted(const Tensor& y, const Tensor& w) {
  const std::vector<C> vy = y.to_complex_vector(w.axes().names()), vw = w.to_complex_vector();
  double s = 0;
  for (size_t k = 0; k < vy.size(); ++k) s += (std::conj(vw[k]) * vy[k]).real();
  return s;
}
// The same loss through Tenax ops (what the tape differentiates).
Tensor weighted_loss(const Tensor& y, const Tensor& w) {
  return is_complex(y.dtype()) ? sum(real(mul(conj(w), y))) : sum(mul(w, y));
}

class ComplexOp : public ::testing::TestWithParam<const OpDef*> {};

std::vector<const OpDef*> complex_ops() {
  std::vector<const OpDef*> ops;
  for (const OpDef* op : registered_ops())
    if (op->complex) ops.push_back(op);
  return ops;
}
std::vector<const OpDef*> real_only_ops() {
  std::vector<const OpDef*> ops;
  for (const OpDef* op : registered_ops())
    if (!op->complex) ops.push_back(op);
  return ops;
}

TEST(ComplexOps, TheDocumentedSetTakesComplexOperands) {
  std::string names;
  for (const OpDef* op : complex_ops()) names += std::string(op->name) + " ";
  EXPECT_EQ(names,
            "neg square exp log sqrt tanh abs add sub mul div pow where astype sum mean dot rename transpose slice "
            "select diagonal broadcast contiguous concat stack interleave cholesky triangular_solve solve "
            "linear_recurrence tridiagonal_solve complex real imag conj angle ");
}

TEST_P(ComplexOp, ForwardMatchesStdComplexAndTheParts) {
  const OpDef& op = *GetParam();
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(7100 * c + 13);
    OpSample s = op.sample(rng, DType::c128);
    std::vector<Tensor> in;
    for (const Tensor& t : s.inputs) in.push_back(scramble(t, rng));
    const Tensor out = run(op, in, s.attrs);
    const std::vector<C> got = out.to_complex_vector(), want = testing::reference_complex_values(op, s, out);
    ASSERT_EQ(got.size(), want.size()) << op.name;
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_LE(std::abs(got[k] - want[k]), 1e-12 * (1.0 + std::abs(want[k]))) << op.name << " case " << c << " element " << k;
  }
}

// The VJP: the gradient of the real loss Σ Re(conj(w) y) is, per complex input element,
// dL/dRe + i dL/dIm (both by central differences); per real input element dL/dx.
TEST_P(ComplexOp, VjpMatchesFiniteDifferencesInBothDirections) {
  const OpDef& op = *GetParam();
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(7300 * c + 5);
    OpSample s = op.sample(rng, DType::c128);
    const Tensor w = weights_like(run(op, s.inputs, s.attrs), rng());
    Tape tape;
    std::vector<Tensor> watched, wrt;
    std::vector<size_t> index;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const bool d = differentiable(op, s.inputs[i], int(i));
      watched.push_back(d ? tape.watch(s.inputs[i]) : s.inputs[i]);
      if (d) {
        wrt.push_back(watched.back());
        index.push_back(i);
      }
    }
    const std::vector<Tensor> g = tape.gradient(weighted_loss(run(op, watched, s.attrs), w), wrt);
    for (size_t k = 0; k < wrt.size(); ++k) {
      const Tensor& x = s.inputs[index[k]];
      ASSERT_EQ(g[k].dtype(), x.dtype()) << op.name;
      const Tensor gk = transpose(g[k], x.axes().names());
      auto derivative = [&](int64_t e, C direction) {
        const C x0 = get_flat_complex(x, e);
        set_flat_complex(x, e, x0 + kStep * direction);
        const double fp = weighted(run(op, s.inputs, s.attrs), w);
        set_flat_complex(x, e, x0 - kStep * direction);
        const double fm = weighted(run(op, s.inputs, s.attrs), w);
        set_flat_complex(x, e, x0);
        return (fp - fm) / (2 * kStep);
      };
      for (int64_t e = 0; e < x.numel(); ++e) {
        const C fd(derivative(e, 1.0), is_complex(x.dtype()) ? derivative(e, C(0, 1)) : 0.0);
        EXPECT_LE(std::abs(get_flat_complex(gk, e) - fd), 1e-6 + 1e-5 * std::abs(fd))
            << op.name << " case " << c << " input " << index[k] << " element " << e << ": " << get_flat_complex(gk, e)
            << " vs " << fd;
      }
    }
  }
}

// The JVP along complex tangents (real ones for real inputs) against (f(x + h t) - f(x - h t)) / 2h.
TEST_P(ComplexOp, JvpMatchesFiniteDifferencesAlongComplexTangents) {
  const OpDef& op = *GetParam();
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(7500 * c + 9);
    OpSample s = op.sample(rng, DType::c128);
    std::vector<Tensor> primals, tangents;
    std::vector<size_t> index;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (differentiable(op, s.inputs[i], int(i))) {
        primals.push_back(s.inputs[i]);
        tangents.push_back(randn(s.inputs[i].axes(), rng(), s.inputs[i].dtype()));
        index.push_back(i);
      }
    if (primals.empty()) continue;
    auto f = [&](const std::vector<Tensor>& p) {
      std::vector<Tensor> in = s.inputs;
      for (size_t k = 0; k < p.size(); ++k) in[index[k]] = p[k];
      return run(op, in, s.attrs);
    };
    auto moved = [&](double h) {
      std::vector<Tensor> p;
      for (size_t k = 0; k < primals.size(); ++k) p.push_back(primals[k] + h * tangents[k]);
      return f(p);
    };
    const auto [value, tangent] = jvp(f, primals, tangents);
    const Tensor fd = (moved(kStep) - moved(-kStep)) / (2 * kStep);
    EXPECT_LE(mismatch(value, f(primals), 1e-14, 1e-14), 1.0) << op.name;
    EXPECT_LE(mismatch(tangent, fd, 1e-5, 1e-6), 1.0) << op.name << " case " << c;
  }
}

// Real inputs lifted to complex128 give float64's values (imaginary part 0), for every op that is
// defined on real numbers too.
TEST_P(ComplexOp, Complex128OnRealInputsEqualsFloat64) {
  const OpDef& op = *GetParam();
  const std::string name = op.name;
  if (name == "complex" || name == "real" || name == "imag" || name == "conj" || name == "angle" || name == "astype")
    GTEST_SKIP() << name << " is about complex numbers themselves";
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(7700 * c + 1);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> lifted;
    for (const Tensor& t : s.inputs) lifted.push_back(is_floating(t.dtype()) ? astype(t, DType::c128) : t);
    const Tensor want = run(op, s.inputs, s.attrs), got = run(op, lifted, s.attrs);
    EXPECT_EQ(got.dtype(), name == "abs" ? DType::f64 : DType::c128) << name;
    EXPECT_LE(mismatch(got, want, 1e-13, 1e-13), 1.0) << name << " case " << c;
  }
}

// nmap over an axis "w" of complex inputs equals the loop over w's slices, stacked.
TEST_P(ComplexOp, NmapEqualsPerSliceLoop) {
  const OpDef& op = *GetParam();
  const int64_t slices = 3;
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(7900 * c + 3);
    OpSample s = op.sample(rng, DType::c128);
    std::vector<Tensor> in;
    std::vector<bool> mapped;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const Tensor& t = s.inputs[i];
      const bool m = is_inexact(t.dtype()) && (i == 0 || rng() % 3 != 0);
      std::vector<Tensor> parts;
      if (m)
        for (int64_t k = 0; k < slices; ++k) parts.push_back(t * (1.0 + 0.1 * double(k)));
      in.push_back(m ? scramble(stack(parts, "w"), rng) : t);
      mapped.push_back(m);
    }
    if (!mapped[0] && !(in.size() > 1 && mapped[1])) continue;
    const Tensor out = nmap([&](const std::vector<Tensor>& p) { return run(op, p, s.attrs); }, {"w"}, in);
    std::vector<Tensor> per;
    for (int64_t k = 0; k < slices; ++k) {
      std::vector<Tensor> slice_in;
      for (size_t i = 0; i < in.size(); ++i) slice_in.push_back(mapped[i] ? select(in[i], "w", k) : in[i]);
      per.push_back(run(op, slice_in, s.attrs));
    }
    EXPECT_LE(mismatch(out, stack(per, "w"), 1e-12, 1e-12), 1.0) << op.name << " case " << c;
  }
}

// Inside a compiled scan (a complex carry scaling the inputs, 1 at every step) the replayed steps
// give the eager op's values, and the gradient through the replayed reverse steps equals the
// gradient through the same steps run eagerly in a loop.
TEST_P(ComplexOp, ReplayedInsideAScanEqualsEager) {
  const OpDef& op = *GetParam();
  const int64_t steps = 3;
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(8100 * c + 7);
    OpSample s = op.sample(rng, DType::c128);
    auto apply_scaled = [&](const Tensor& scale) {
      std::vector<Tensor> in;
      for (const Tensor& t : s.inputs)
        in.push_back(is_complex(t.dtype()) ? t * scale : is_floating(t.dtype()) ? t * real(scale) : t);
      return run(op, in, s.attrs);
    };
    auto body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>&) {
      return std::make_pair(std::vector<Tensor>{carry[0] * 1.0}, std::vector<Tensor>{apply_scaled(carry[0])});
    };
    ScanOptions o;
    o.length = steps;
    const Tensor one = scalar(C(1.0, 0.0));
    const Tensor eager = run(op, s.inputs, s.attrs);
    const ScanResult r = scan(body, {one}, {}, "__t", o);
    for (int64_t k = 0; k < steps; ++k)
      EXPECT_LE(mismatch(select(r.ys[0], "__t", k), eager, 1e-12, 1e-12), 1.0) << op.name << " case " << c;
    const Tensor w = weights_like(eager, rng());
    const Tensor through_scan = grad(
        [&](const std::vector<Tensor>& p) { return weighted_loss(scan(body, {p[0]}, {}, "__t", o).ys[0], w); },
        {one})[0];
    const Tensor through_loop = grad(
        [&](const std::vector<Tensor>& p) {
          Tensor carry = p[0], total;
          for (int64_t k = 0; k < steps; ++k) {
            const Tensor y = weighted_loss(apply_scaled(carry), w);
            total = k == 0 ? y : total + y;
            carry = carry * 1.0;
          }
          return total;
        },
        {one})[0];
    EXPECT_LE(mismatch(through_scan, through_loop, 1e-11, 1e-11), 1.0) << op.name << " case " << c;
  }
}

// compile(): the second and third calls replay the captured programs on new complex inputs.
TEST_P(ComplexOp, CompiledEqualsEager) {
  const OpDef& op = *GetParam();
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(8300 * c + 11);
    OpSample s = op.sample(rng, DType::c128);
    std::vector<size_t> diff;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (differentiable(op, s.inputs[i], int(i))) diff.push_back(i);
    const CompiledFunction f = compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{run(op, in, s.attrs)}; });
    for (int call = 0; call < 3; ++call) {
      std::vector<Tensor> in = s.inputs;
      for (size_t i : diff) in[i] = s.inputs[i] * (1.0 + 0.25 * call);
      const Tensor want = run(op, in, s.attrs);
      EXPECT_LE(mismatch(f(in)[0], want, 1e-14, 1e-14), 1.0) << op.name << " case " << c << " call " << call;
      if (diff.empty()) continue;
      const Tensor w = weights_like(want, rng());
      auto loss = [&](bool compiled) {
        return [&, compiled](const std::vector<Tensor>& p) {
          std::vector<Tensor> x = in;
          for (size_t k = 0; k < diff.size(); ++k) x[diff[k]] = p[k];
          return weighted_loss(compiled ? f(x)[0] : run(op, x, s.attrs), w);
        };
      };
      std::vector<Tensor> at;
      for (size_t i : diff) at.push_back(in[i]);
      const std::vector<Tensor> gc = grad(loss(true), at), ge = grad(loss(false), at);
      for (size_t k = 0; k < at.size(); ++k)
        EXPECT_LE(mismatch(gc[k], ge[k], 1e-13, 1e-13), 1.0) << op.name << " case " << c << " call " << call;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, ComplexOp, ::testing::ValuesIn(complex_ops()),
                         [](const ::testing::TestParamInfo<const OpDef*>& p) { return std::string(p.param->name); });

// Every op that does not take complex operands says so, naming itself and the dtype.
class RealOnlyOp : public ::testing::TestWithParam<const OpDef*> {};
TEST_P(RealOnlyOp, RaisesADTypeErrorNamingTheOpAndTheDtype) {
  const OpDef& op = *GetParam();
  std::mt19937_64 rng(17);
  OpSample s = op.sample(rng, DType::f64);
  for (Tensor& t : s.inputs)
    if (is_floating(t.dtype())) t = astype(t, DType::c128);
  const std::string m = testing::error_message<DTypeError>([&] { (void)run(op, s.inputs, s.attrs); });
  EXPECT_NE(m.find(std::string("[") + op.name + "]"), std::string::npos) << m;
  EXPECT_NE(m.find("complex128"), std::string::npos) << m;
}
INSTANTIATE_TEST_SUITE_P(Registry, RealOnlyOp, ::testing::ValuesIn(real_only_ops()),
                         [](const ::testing::TestParamInfo<const OpDef*>& p) { return std::string(p.param->name); });

// ---- making and reading complex tensors ----
TEST(ComplexTensors, MakeReadAndConvert) {
  const Tensor z = tensor(std::vector<C>{{1.0, 2.0}, {-3.0, 0.5}}, Axes{{"i", 2}});
  EXPECT_EQ(z.dtype(), DType::c128);
  EXPECT_EQ(z.describe(), "Tensor(complex128, (i=2), cpu)");
  EXPECT_EQ(z.at_complex({{"i", 1}}), C(-3.0, 0.5));
  EXPECT_EQ(complex(real(z), imag(z)).to_complex_vector(), z.to_complex_vector());
  EXPECT_EQ(full(Axes{{"i", 2}}, C(0.25, -1.0)).to_complex_vector(), (std::vector<C>{{0.25, -1.0}, {0.25, -1.0}}));
  EXPECT_EQ(abs(z).to_vector(), (std::vector<double>{std::abs(C(1, 2)), std::abs(C(-3, 0.5))}));
  EXPECT_EQ(angle(z).to_vector(), (std::vector<double>{std::arg(C(1, 2)), std::arg(C(-3, 0.5))}));
  EXPECT_EQ(conj(z).to_complex_vector(), (std::vector<C>{{1.0, -2.0}, {-3.0, -0.5}}));
  // Conversions: real -> complex (imaginary 0), between complex precisions; never complex -> real.
  const Tensor x = tensor({1.5, -2.0}, "i");
  EXPECT_EQ(astype(x, DType::c128).to_complex_vector(), (std::vector<C>{{1.5, 0}, {-2.0, 0}}));
  EXPECT_EQ(astype(x, DType::c64).dtype(), DType::c64);
  EXPECT_EQ(astype(astype(z, DType::c64), DType::c128).to_complex_vector(), z.to_complex_vector());
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] { (void)astype(z, DType::f64); }),
                 "[astype] complex128 -> float64 would drop the imaginary part; take real(z), imag(z) or abs(z) explicitly");
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] { (void)select(z, "i", 0).item(); }),
                 "[item] the tensor is complex128; read complex values with item_complex, at_complex or to_complex_vector (or take real() first)");
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] { (void)maximum(z, z); }),
                 "[maximum] is not defined for complex128 (complex numbers: see docs/complex.md for the ops that take them)");
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] { (void)add(z, x); }),
                 "[add] input 0 is complex128 but input 1 is float64; convert one with astype (Tenax never converts silently)");
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] { (void)complex(z, z); }),
                 "[complex] is not defined for complex128 (complex numbers: see docs/complex.md for the ops that take them)");
}

// ---- the convention (docs/complex.md) on closed forms ----
TEST(ComplexConvention, TheGradientOfARealLossIsDLdRePlusIDLdIm) {
  const Tensor z = tensor(std::vector<C>{{1.5, -0.5}, {-2.0, 3.0}}, Axes{{"i", 2}});
  const C a(0.3, 0.7);
  // |z|^2: 2z.  Im z: i.  Re(a z): conj(a).
  auto g = [&](const Function& f) { return grad(f, {z})[0].to_complex_vector(); };
  EXPECT_EQ(g([](const std::vector<Tensor>& p) { return sum(real(mul(p[0], conj(p[0])))); }),
            (std::vector<C>{{3.0, -1.0}, {-4.0, 6.0}}));
  EXPECT_EQ(g([](const std::vector<Tensor>& p) { return sum(imag(p[0])); }), (std::vector<C>{{0, 1}, {0, 1}}));
  EXPECT_EQ(g([&](const std::vector<Tensor>& p) { return sum(real(mul(p[0], scalar(a)))); }),
            (std::vector<C>{std::conj(a), std::conj(a)}));
  EXPECT_MESSAGE(testing::error_message<DTypeError>([&] { (void)grad([](const std::vector<Tensor>& p) { return sum(p[0]); }, {z}); }),
                 "[grad] the output is complex128; a gradient needs a real loss (take real(), abs() or a squared modulus) or pass a cotangent to vjp (docs/complex.md)");
}

// pow's derivative in the exponent at a zero base is 0, as for real numbers (not 0 · log 0 = NaN).
TEST(ComplexConvention, PowAtAZeroBaseHasAZeroExponentDerivative) {
  const Tensor a = scalar(C(0.0, 0.0)), b = scalar(C(2.0, 0.5));
  const std::vector<Tensor> g = grad([](const std::vector<Tensor>& p) { return real(pow(p[0], p[1])); }, {a, b});
  EXPECT_EQ(g[1].item_complex(), C(0.0, 0.0));
  const Tensor ar = scalar(0.0), br = scalar(2.0);
  EXPECT_EQ(grad([](const std::vector<Tensor>& p) { return pow(p[0], p[1]); }, {ar, br})[1].item(), 0.0);
}

TEST(ComplexConvention, VjpIsTheConjugateDerivativeTimesTheCotangentJvpTheDerivativeTimesTheTangent) {
  const C z0(0.4, -1.1), ybar(0.5, 2.0), t(-1.0, 0.25);
  const Tensor z = scalar(z0);
  const VjpResult r = vjp([](const std::vector<Tensor>& p) { return exp(p[0]); }, {z});
  const C got = r.pullback(scalar(ybar))[0].item_complex();
  EXPECT_LE(std::abs(got - std::conj(std::exp(z0)) * ybar), 1e-15);
  const C tangent = jvp([](const std::vector<Tensor>& p) { return exp(p[0]); }, {z}, {scalar(t)}).second.item_complex();
  EXPECT_LE(std::abs(tangent - std::exp(z0) * t), 1e-15);
}

// jacobian: the holomorphic derivative for complex -> complex; dy/dx for a real argument of a
// complex output; dy/dRe + i dy/dIm (the gradient) for a real output of a complex argument. Both
// modes give the same.
TEST(ComplexConvention, JacobianInBothModes) {
  using Mode = JacobianOptions::Mode;
  const std::vector<C> zv{{0.5, 1.0}, {-1.5, 0.25}};
  const Tensor z = tensor(zv, Axes{{"i", 2}});
  const Tensor x = tensor({0.75, -2.0}, "i");
  const C a(0.3, -0.6);
  for (Mode m : {Mode::reverse, Mode::forward}) {
    JacobianOptions o;
    o.mode = m;
    // y_i = a z_i^2: dy_i/dz_j = 2 a z_i δ_ij.
    const Tensor j1 = jacobian([&](const std::vector<Tensor>& p) { return mul(scalar(a), square(p[0])); }, {z}, o)[0];
    // y_i = a x_i: a δ_ij.
    const Tensor j2 = jacobian([&](const std::vector<Tensor>& p) { return mul(scalar(a), astype(p[0], DType::c128)); }, {x}, o)[0];
    // y_i = |z_i|^2: 2 z_i δ_ij.
    const Tensor j3 = jacobian([&](const std::vector<Tensor>& p) { return real(mul(p[0], conj(p[0]))); }, {z}, o)[0];
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 2; ++k) {
        const C d = i == k ? 1.0 : 0.0;
        EXPECT_LE(std::abs(j1.at_complex({{"i", i}, {"i_in", k}}) - d * 2.0 * a * zv[size_t(i)]), 1e-15);
        EXPECT_LE(std::abs(j2.at_complex({{"i", i}, {"i_in", k}}) - d * a), 1e-15);
        EXPECT_LE(std::abs(j3.at_complex({{"i", i}, {"i_in", k}}) - d * 2.0 * zv[size_t(i)]), 1e-15);
      }
  }
}

// The seed's recurrence x_t = λ x_{t-1} + B u_t with complex λ and B: through scan, through
// linear_recurrence and by hand give the same states; reverse-mode gradients agree between scan and
// linear_recurrence; forward mode through scan agrees with reverse mode.
// z[b, m, n] = Σ_k x[b, m, k] y[b, k, n] by std::complex in plain loops (row-major, k ascending).
std::vector<C> product_reference(const std::vector<C>& x, const std::vector<C>& y, int64_t B, int64_t M,
                                 int64_t K, int64_t N) {
  std::vector<C> z(static_cast<size_t>(B * M * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        C s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += x[static_cast<size_t>((b * M + m) * K + k)] * y[static_cast<size_t>((b * K + k) * N + n)];
        z[static_cast<size_t>((b * M + m) * N + n)] = s;
      }
  return z;
}

double largest_difference(const std::vector<C>& a, const std::vector<C>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
  return d;
}

// Complex contractions take every path of the CPU kernel (backends/cpu/contract.cpp): direct loops,
// axpy rows along a wide m, dot products along a wide k, zgemm, a batch, and — through the kernel
// table, as a reverse rule records it — an outer product added into z whose m group has two dims
// (moved to the batch). Against std::complex sums.
TEST(ComplexContraction, EveryKernelPathEqualsTheStdComplexSums) {
  struct Case {
    int64_t B, M, K, N;
  };
  // {3, 4, 40} and {5, 6, 33}: the wide axis n in rows of axpy passes (contract_wide).
  for (const Case c : {Case{1, 3, 4, 5}, Case{1, 40, 3, 2}, Case{1, 2, 50, 3}, Case{1, 30, 20, 25}, Case{3, 4, 5, 6},
                       Case{1, 3, 4, 40}, Case{2, 5, 6, 33}}) {
    SCOPED_TRACE("B M K N = " + std::to_string(c.B) + " " + std::to_string(c.M) + " " + std::to_string(c.K) + " " +
                 std::to_string(c.N));
    const Tensor x = randn(Axes{{"b", c.B}, {"m", c.M}, {"k", c.K}}, 3, DType::c128);
    const Tensor y = randn(Axes{{"b", c.B}, {"k", c.K}, {"n", c.N}}, 4, DType::c128);
    const std::vector<C> z = dot(x, y, {"k"}).to_complex_vector({"b", "m", "n"});
    EXPECT_LT(largest_difference(z, product_reference(x.to_complex_vector(), y.to_complex_vector(), c.B, c.M, c.K, c.N)),
              1e-14);
  }
  // z[h, i, s] += g[h, s] u[i]: m = (h, s), n = i, no k.
  const int64_t H = 5, I = 3, S = 20;
  const Tensor g = randn(Axes{{"h", H}, {"s", S}}, 5, DType::c128), u = randn(Axes{{"i", I}}, 6, DType::c128);
  const Tensor z = randn(Axes{{"h", H}, {"i", I}, {"s", S}}, 7, DType::c128);
  std::vector<C> expect = z.to_complex_vector();
  const std::vector<C> gv = g.to_complex_vector(), uv = u.to_complex_vector();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t s = 0; s < S; ++s) expect[static_cast<size_t>((h * I + i) * S + s)] += gv[static_cast<size_t>(h * S + s)] * uv[static_cast<size_t>(i)];
  detail::ContractArgs a;
  a.x = g.data_ptr();
  a.y = u.data_ptr();
  a.z = z.data_ptr();
  a.accumulate = true;
  a.m.rank = 2;
  a.m.sizes[0] = H;
  a.m.sizes[1] = S;
  a.m.x[0] = S;
  a.m.x[1] = 1;
  a.m.z[0] = I * S;
  a.m.z[1] = 1;
  a.n.rank = 1;
  a.n.sizes[0] = I;
  a.n.y[0] = 1;
  a.n.z[0] = S;
  detail::kernels(z.device()).contract[2](a);
  EXPECT_EQ(z.to_complex_vector(), expect);
}

// mul and its rules (VJP and JVP, written and accumulated) in both complex dtypes over rows of
// every length up to past a few vectors, each operand a row, a strided row or one number, through
// the strided kernel and its flat twin: bitwise the scalar twin's product on every element (the
// AVX2 rows where dispatched, the scalar loop under TENAX_CPU_AVX2=0: test_complex_baseline).
// Runs fn over a row of n elements, operand a at data[a] with stride[a]: its flat twin or itself.
template <class C>
void run_row(detail::ElementwiseFn fn, bool use_flat, int arity, int64_t n, std::vector<std::vector<C>>& data,
             const int64_t* stride) {
  if (use_flat) {
    detail::FlatArg args[5];
    for (int a = 0; a < arity; ++a) args[a] = {data[static_cast<size_t>(a)].data(), stride[a], 0};
    detail::flat_twin(fn)(1, n, args);
    return;
  }
  detail::LoopDims dims;
  dims.rank = 1;
  dims.sizes[0] = n;
  detail::LoopArg args[5];
  for (int a = 0; a < arity; ++a) {
    args[a].data = data[static_cast<size_t>(a)].data();
    args[a].strides[0] = stride[a];
  }
  fn(dims, args);
}

template <class C>
void check_product_rows(detail::ElementwiseFn fn, int arity, const std::string& what) {
  const detail::ScalarFn one = detail::scalar_twin(fn);
  ASSERT_TRUE(detail::flat_twin(fn) && one) << what;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  using R = typename C::value_type;
  for (const int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 12, 17, 33})
    for (int pattern = 0; pattern < (arity == 3 ? 9 : 27); ++pattern) {  // operands 1, 2 (3): stride 1, 0 or 2
      int64_t stride[5] = {1, 0, 0, 0, 0};
      for (int a = 1, p = pattern; a < std::min(arity, 4); ++a, p /= 3) stride[a] = p % 3 == 2 ? 2 : p % 3;
      std::vector<std::vector<C>> data(5);
      for (int a = 0; a < arity; ++a) {
        data[static_cast<size_t>(a)].resize(static_cast<size_t>(std::max<int64_t>(1, n * stride[a])));
        for (C& v : data[static_cast<size_t>(a)]) v = C(static_cast<R>(normal(rng)), static_cast<R>(normal(rng)));
      }
      std::vector<C> expect = data[0];
      for (int64_t i = 0; i < n; ++i) {
        void* p[5] = {&expect[static_cast<size_t>(i)]};
        for (int a = 1; a < arity; ++a) p[a] = &data[static_cast<size_t>(a)][static_cast<size_t>(i * stride[a])];
        one(p);
      }
      const std::vector<C> before = data[0];
      for (const bool use_flat : {false, true}) {
        SCOPED_TRACE(what + " n " + std::to_string(n) + " pattern " + std::to_string(pattern) + (use_flat ? " flat" : " strided"));
        data[0] = before;
        run_row(fn, use_flat, arity, n, data, stride);
        ASSERT_EQ(std::memcmp(data[0].data(), expect.data(), expect.size() * sizeof(C)), 0);
      }
    }
}

TEST(ComplexProducts, RowsOfEveryLayoutEqualTheScalarKernelBitwise) {
  const detail::KernelTable& k = detail::kernels(Device::cpu());
  const int mul = static_cast<int>(detail::BinaryOp::mul);
  const int da = static_cast<int>(detail::DerivOp::mul_a), db = static_cast<int>(detail::DerivOp::mul_b);
  check_product_rows<std::complex<double>>(k.binary[mul][2], 3, "mul c128");
  check_product_rows<std::complex<float>>(k.binary[mul][3], 3, "mul c64");
  for (const int d : {da, db}) {
    const std::string side = d == da ? " a" : " b";
    check_product_rows<std::complex<double>>(k.deriv_set[d][2], 5, "vjp set" + side);
    check_product_rows<std::complex<double>>(k.deriv_acc[d][2], 5, "vjp acc" + side);
    check_product_rows<std::complex<double>>(k.complex.tangent_set[d][0], 5, "jvp set" + side);
    check_product_rows<std::complex<double>>(k.complex.tangent_acc[d][0], 5, "jvp acc" + side);
    check_product_rows<std::complex<float>>(k.deriv_acc[d][3], 5, "vjp acc c64" + side);
    check_product_rows<std::complex<float>>(k.complex.tangent_set[d][1], 5, "jvp set c64" + side);
  }
  // And the scalar twin is the textbook product: (1 + 2i)(3 - i) = 5 + 5i, conj for the VJP.
  std::complex<double> y(0.5, 0), g(1, 2), a(0, 0), b(3, -1), unused(0, 0);
  void* p[5] = {&y, &g, &a, &b, &unused};  // mul_a's VJP: dst += g conj(b)
  detail::scalar_twin(k.deriv_acc[da][2])(p);
  EXPECT_EQ(y, std::complex<double>(0.5 + 1.0, 7.0));  // (1 + 2i)(3 + i) = 1 + 7i
  detail::scalar_twin(k.binary[mul][2])(std::array<void*, 3>{&y, &g, &b}.data());
  EXPECT_EQ(y, std::complex<double>(5, 5));
}

TEST(ComplexConvention, AComplexRecurrenceThroughScanAndLinearRecurrence) {
  const int64_t T = 12, n = 3, m = 2;
  const Tensor lambda = complex(uniform(Axes{{"n", n}}, 1, 0.5, 0.9), uniform(Axes{{"n", n}}, 2, -0.4, 0.4));
  const Tensor B = randn(Axes{{"n", n}, {"m", m}}, 3, DType::c128);
  const Tensor u = astype(randn(Axes{{"t", T}, {"m", m}}, 4), DType::c128);
  auto by_scan = [&](const std::vector<Tensor>& p) {
    auto body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& xs) {
      const Tensor next = p[0] * carry[0] + dot(p[1], xs[0], {"m"});
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
    };
    return scan(body, {zeros(Axes{{"n", n}}, DType::c128)}, {u}, "t").ys[0];
  };
  auto by_recurrence = [&](const std::vector<Tensor>& p) {
    return linear_recurrence(p[0], dot(p[1], u, {"m"}), "t");
  };
  const Tensor xs = by_scan({lambda, B}), xr = by_recurrence({lambda, B});
  EXPECT_LE(mismatch(xs, xr, 1e-14, 1e-14), 1.0);
  // By hand at the last step.
  const std::vector<C> l = lambda.to_complex_vector(), b = B.to_complex_vector(), uv = u.to_complex_vector();
  for (int64_t i = 0; i < n; ++i) {
    C state = 0;
    for (int64_t t = 0; t < T; ++t) {
      C bu = 0;
      for (int64_t k = 0; k < m; ++k) bu += b[size_t(i * m + k)] * uv[size_t(t * m + k)];
      state = l[size_t(i)] * state + bu;
    }
    EXPECT_LE(std::abs(xs.at_complex({{"t", T - 1}, {"n", i}}) - state), 1e-13);
  }
  const Tensor w = randn(xs.axes(), 5, DType::c128);
  auto loss = [&](const Function& f) { return [&, f](const std::vector<Tensor>& p) { return weighted_loss(f(p), w); }; };
  const std::vector<Tensor> gs = grad(loss(by_scan), {lambda, B}), gr = grad(loss(by_recurrence), {lambda, B});
  EXPECT_LE(mismatch(gs[0], gr[0], 1e-12, 1e-12), 1.0);
  EXPECT_LE(mismatch(gs[1], gr[1], 1e-12, 1e-12), 1.0);
  using Mode = JacobianOptions::Mode;
  JacobianOptions fwd, rev;
  fwd.mode = Mode::forward;
  rev.mode = Mode::reverse;
  auto last = [&](const std::vector<Tensor>& p) { return select(by_scan(p), "t", T - 1); };
  const std::vector<Tensor> jf = jacobian(last, {lambda, B}, fwd), jr = jacobian(last, {lambda, B}, rev);
  EXPECT_LE(mismatch(jf[0], jr[0], 1e-12, 1e-12), 1.0);
  EXPECT_LE(mismatch(jf[1], jr[1], 1e-12, 1e-12), 1.0);
}

// The same recurrence through associative_scan (the seed's own formulation) and inside map: the
// states and the gradients equal linear_recurrence's.
TEST(ComplexConvention, AssociativeScanAndMapOfComplexRecurrences) {
  const int64_t T = 9, n = 4;
  const Tensor lambda = complex(uniform(Axes{{"n", n}}, 21, 0.5, 0.9), uniform(Axes{{"n", n}}, 22, -0.5, 0.5));
  const Tensor bu = randn(Axes{{"t", T}, {"n", n}}, 23, DType::c128);
  const Tensor w = randn(Axes{{"t", T}, {"n", n}}, 24, DType::c128);
  auto by_recurrence = [&](const std::vector<Tensor>& p) { return linear_recurrence(p[0], p[1], "t"); };
  auto by_associative = [&](const std::vector<Tensor>& p) {
    auto combine = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
      return std::vector<Tensor>{b[0] * a[0], b[0] * a[1] + b[1]};
    };
    const Tensor decay = broadcast(p[0], Axes{{"t", T}});
    return associative_scan(combine, {transpose(decay, {"t", "n"}), p[1]}, "t")[1];
  };
  auto by_map = [&](const std::vector<Tensor>& p) {  // one recurrence per state element
    return map([](const std::vector<Tensor>& q) { return std::vector<Tensor>{linear_recurrence(q[0], q[1], "t")}; },
               "n", p)[0];
  };
  const Tensor want = by_recurrence({lambda, bu});
  EXPECT_LE(mismatch(by_associative({lambda, bu}), want, 1e-13, 1e-13), 1.0);
  EXPECT_LE(mismatch(by_map({lambda, bu}), want, 1e-14, 1e-14), 1.0);
  auto loss = [&](const Function& f) { return [&, f](const std::vector<Tensor>& p) { return weighted_loss(f(p), w); }; };
  const std::vector<Tensor> g = grad(loss(by_recurrence), {lambda, bu});
  for (const Function& f : {Function(by_associative), Function(by_map)}) {
    const std::vector<Tensor> h = grad(loss(f), {lambda, bu});
    EXPECT_LE(mismatch(h[0], g[0], 1e-12, 1e-12), 1.0);
    EXPECT_LE(mismatch(h[1], g[1], 1e-12, 1e-12), 1.0);
  }
}

// complex64 agrees with complex128 to float32's precision, op by op.
TEST_P(ComplexOp, Complex64AgreesWithComplex128) {
  const OpDef& op = *GetParam();
  for (int c = 0; c < kCases; ++c) {
    std::mt19937_64 rng(8500 * c + 3);
    OpSample s = op.sample(rng, DType::c128);
    std::vector<Tensor> in64;
    for (const Tensor& t : s.inputs)
      in64.push_back(is_complex(t.dtype()) ? astype(t, DType::c64) : is_floating(t.dtype()) ? astype(t, DType::f32) : t);
    Attrs a = s.attrs;
    if (std::string(op.name) == "astype") a.i[0] = static_cast<int64_t>(DType::c64);
    const Tensor want = run(op, s.inputs, s.attrs), got = run(op, in64, a);
    EXPECT_EQ(got.dtype(), is_complex(want.dtype()) ? DType::c64 : DType::f32) << op.name;
    EXPECT_LE(mismatch(got, want, 1e-4, 1e-5), 1.0) << op.name << " case " << c;
  }
}

// A real optimiser fits complex parameters: L-BFGS over (Re, Im) pairs, with the gradient that grad
// gives (its real and imaginary parts, as they are), recovers λ and b of a simulated recurrence.
TEST(ComplexConvention, LbfgsFitsComplexParametersThroughGrad) {
  const int64_t T = 60;
  const C lambda_true = std::polar(0.85, 0.4), b_true(0.5, -0.2);
  const Tensor u = astype(randn(Axes{{"t", T}}, 11), DType::c128);
  auto simulate = [&](const Tensor& lambda, const Tensor& b) { return linear_recurrence(lambda, b * u, "t"); };
  const Tensor data = simulate(scalar(lambda_true), scalar(b_true));
  auto objective = [&](const Eigen::VectorXd& theta, Eigen::VectorXd& gradient) {
    const Tensor lambda = scalar(C(theta[0], theta[1])), b = scalar(C(theta[2], theta[3]));
    auto [value, g] = value_and_grad(
        [&](const std::vector<Tensor>& p) {
          const Tensor r = simulate(p[0], p[1]) - data;
          return sum(real(mul(r, conj(r))));
        },
        {lambda, b});
    const C gl = g[0].item_complex(), gb = g[1].item_complex();
    gradient << gl.real(), gl.imag(), gb.real(), gb.imag();
    return value.item();
  };
  LBFGSpp::LBFGSParam<double> param;
  param.epsilon = 1e-10;
  param.max_iterations = 200;
  LBFGSpp::LBFGSSolver<double> solver(param);
  Eigen::VectorXd theta(4);
  theta << 0.5, 0.0, 1.0, 0.0;
  double fx = 0;
  solver.minimize(objective, theta, fx);
  EXPECT_LE(std::abs(C(theta[0], theta[1]) - lambda_true), 1e-7) << theta.transpose();
  EXPECT_LE(std::abs(C(theta[2], theta[3]) - b_true), 1e-7) << theta.transpose();
  EXPECT_LE(fx, 1e-12);
}

}  // namespace
}  // namespace tenax
