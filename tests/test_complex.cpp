// Every op that takes complex operands (OpDef::complex), from its own sampler in complex128: the
// forward values against std::complex and the parts' references, the VJP against central finite
// differences in the real AND imaginary direction of every input element, the JVP against finite
// differences along complex tangents, float64 == complex128 on real inputs, nmap == the loop over
// slices, a compiled scan's replay and compile() against eager. Every other op raises a DTypeError
// naming it and the dtype. Then the convention (docs/complex.md) on closed forms, and a real
// optimiser (L-BFGS) fitting complex parameters through grad.
#include <Eigen/Core>
#include <LBFGS.h>

#include <cmath>
#include <complex>
#include <string>

#include "expect_message.h"
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
            "select diagonal broadcast contiguous concat stack linear_recurrence complex real imag conj angle ");
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

}  // namespace
}  // namespace tenax
