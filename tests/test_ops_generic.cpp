// The generic op tests: EVERY registered op is checked here from its own sampler, so an op cannot
// be added without its forward values being checked against an independent reference
// (op_reference_values.cpp: a new op fails until it has one) and under random layouts, its VJP and
// JVP against central finite differences in float64, its VJP with a batched cotangent, its JVP
// with batched tangents, its batching rule under nmap, its replay inside a compiled scan and
// through compile (DESIGN contract 2; docs/architecture.md).
#include <cmath>
#include <complex>
#include <string>

#include "expect_message.h"
#include "op_check.h"
#include "op_reference_values.h"

namespace tenax {
namespace {

using testing::get_flat;
using testing::mismatch;
using testing::scramble;
using testing::set_flat;

constexpr int kCasesPerOp = 8;
constexpr double kStep = 1e-6;

std::string op_names() {
  std::string s;
  for (const OpDef* op : registered_ops()) s += std::string(op->name) + " ";
  return s;
}

class EveryOp : public ::testing::TestWithParam<const OpDef*> {};

Tensor run(const OpDef& op, const std::vector<Tensor>& in, const Attrs& a) {
  return detail::apply(op, in, a);
}

// The ops whose samples are complex whatever the dtype asked for (complex(re, im) and the ops that
// take a complex number apart): tests/test_complex.cpp checks them with the other ops' complex
// forms; here only their forward values are.
bool complex_family(const OpDef& op) {
  for (const char* n : {"complex", "real", "imag", "conj", "angle"})
    if (std::string(op.name) == n) return true;
  return false;
}
#define SKIP_COMPLEX_FAMILY(op) \
  if (complex_family(op)) GTEST_SKIP() << (op).name << ": complex operands, checked in tests/test_complex.cpp"

bool differentiable_input(const OpDef& op, const Tensor& t, int i) {
  return is_floating(t.dtype()) && !(i < 31 && (op.nondiff & (1u << i)));
}

// Σ w * op(inputs) as a double: the scalar whose gradient the VJP gives, seeded with w.
double weighted(const OpDef& op, const std::vector<Tensor>& in, const Attrs& a, const Tensor& w) {
  Tensor y = run(op, in, a);
  return sum(astype(y, DType::f64) * w).item();
}

TEST(Registry, EveryOpIsCompleteAndUniquelyNamed) {
  const auto& ops = registered_ops();
  ASSERT_GE(ops.size(), 39u) << op_names();
  for (const OpDef* op : ops) {
    SCOPED_TRACE(op->name);
    EXPECT_NE(op->forward, nullptr);
    EXPECT_NE(op->sample, nullptr) << "an op without a sampler cannot be tested";
    // Either fully differentiable or explicitly not (comparisons: bool outputs).
    EXPECT_EQ(op->vjp == nullptr, op->jvp == nullptr);
    EXPECT_EQ(find_op(op->name), op) << "duplicate op name";
  }
  for (const char* name : {"add", "dot", "cholesky", "slice", "logsumexp", "where", "stack"})
    EXPECT_NE(find_op(name), nullptr) << name;
}

// Every op's values against its independent reference (op_reference_values.cpp: plain loops over
// named indices, sharing no code with the kernels), in float64 on random scrambled layouts.
TEST_P(EveryOp, ForwardMatchesAnIndependentReference) {
  const OpDef& op = *GetParam();
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(1500 * c + 29);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> in;
    for (const Tensor& t : s.inputs) in.push_back(scramble(t, rng));
    const Tensor out = run(op, in, s.attrs);
    if (complex_family(op)) {
      const std::vector<std::complex<double>> got = out.to_complex_vector(),
                                              want = testing::reference_complex_values(op, s, out);
      ASSERT_EQ(got.size(), want.size()) << op.name;
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_LE(std::abs(got[k] - want[k]), 1e-12 * (1.0 + std::abs(want[k]))) << op.name << " case " << c;
      continue;
    }
    const std::vector<double> got = out.to_vector(), want = testing::reference_values(op, s, out);
    ASSERT_EQ(got.size(), want.size()) << op.name;
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], want[k], 1e-12 * (1.0 + std::abs(want[k]))) << op.name << " case " << c << " element " << k;
  }
}

TEST_P(EveryOp, ForwardIsLayoutInvariant) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(1000 * c + 17);
    OpSample s = op.sample(rng, DType::f64);
    Tensor ref = run(op, s.inputs, s.attrs);
    std::vector<Tensor> scrambled;
    for (const Tensor& t : s.inputs) scrambled.push_back(scramble(t, rng));
    Tensor out = run(op, scrambled, s.attrs);
    if (ref.dtype() == DType::b8) {
      EXPECT_EQ(out.to_vector(ref.axes().names()), ref.to_vector()) << op.name << " case " << c;
      continue;
    }
    EXPECT_LE(mismatch(out, ref, 1e-12, 1e-12), 1.0) << op.name << " case " << c;
  }
}

TEST_P(EveryOp, Float32AgreesWithFloat64) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(2000 * c + 3);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> in32;
    for (const Tensor& t : s.inputs) in32.push_back(is_floating(t.dtype()) ? astype(t, DType::f32) : t);
    Attrs a32 = s.attrs;
    if (std::string(op.name) == "astype") a32.i[0] = static_cast<int64_t>(DType::f32);
    Tensor ref = run(op, s.inputs, s.attrs);
    Tensor out = run(op, in32, a32);
    if (ref.dtype() == DType::b8) continue;
    EXPECT_EQ(out.dtype(), DType::f32) << op.name;
    EXPECT_LE(mismatch(astype(out, DType::f64), ref, 1e-4, 1e-5), 1.0) << op.name << " case " << c;
  }
}

TEST_P(EveryOp, VjpMatchesFiniteDifferences) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  if (!op.vjp) GTEST_SKIP() << op.name << " has a bool output: not differentiable by design";
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(3000 * c + 5);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> in;
    for (const Tensor& t : s.inputs) in.push_back(scramble(t, rng));
    Tensor y0 = run(op, in, s.attrs);
    Tensor w = randn(y0.axes(), rng());

    Tape tape;
    std::vector<Tensor> watched, wrt;
    std::vector<int> wrt_index;
    for (size_t i = 0; i < in.size(); ++i) {
      if (differentiable_input(op, in[i], int(i))) {
        watched.push_back(tape.watch(in[i]));
        wrt.push_back(watched.back());
        wrt_index.push_back(int(i));
      } else {
        watched.push_back(in[i]);
      }
    }
    Tensor loss = sum(run(op, watched, s.attrs) * w);
    std::vector<Tensor> g = tape.gradient(loss, wrt);

    for (size_t k = 0; k < wrt.size(); ++k) {
      const Tensor& x = in[static_cast<size_t>(wrt_index[k])];
      ASSERT_TRUE(g[k].axes().same_set(x.axes())) << op.name;
      Tensor gk = transpose(g[k], x.axes().names());
      for (int64_t e = 0; e < x.numel(); ++e) {
        const double x0 = get_flat(x, e);
        set_flat(x, e, x0 + kStep);
        const double fp = weighted(op, in, s.attrs, w);
        set_flat(x, e, x0 - kStep);
        const double fm = weighted(op, in, s.attrs, w);
        set_flat(x, e, x0);
        const double fd = (fp - fm) / (2 * kStep);
        const double an = get_flat(gk, e);
        EXPECT_NEAR(an, fd, 1e-6 + 1e-5 * std::fabs(fd))
            << op.name << " case " << c << " input " << wrt_index[k] << " element " << e << " of "
            << x.axes().describe();
      }
    }
  }
}

TEST_P(EveryOp, JvpMatchesFiniteDifferences) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  if (!op.jvp) GTEST_SKIP() << op.name << " has a bool output: not differentiable by design";
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(4000 * c + 7);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> in, tangents;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      in.push_back(scramble(s.inputs[i], rng));
      // Leave some tangents out: an undefined tangent means zero.
      bool give = differentiable_input(op, in[i], int(i)) && (rng() % 4 != 0 || i == 0);
      tangents.push_back(give ? randn(in[i].axes(), rng()) : Tensor());
    }
    auto f = [&](const std::vector<Tensor>& p) { return run(op, p, s.attrs); };
    // jvp watches every argument; bool inputs stay constants through a pass-through wrapper.
    std::vector<Tensor> primals, prim_tangents;
    std::vector<int> map;
    for (size_t i = 0; i < in.size(); ++i)
      if (is_floating(in[i].dtype())) {
        primals.push_back(in[i]);
        prim_tangents.push_back(tangents[i]);
        map.push_back(int(i));
      }
    auto g = [&](const std::vector<Tensor>& p) {
      std::vector<Tensor> full = in;
      for (size_t k = 0; k < p.size(); ++k) full[static_cast<size_t>(map[k])] = p[k];
      return f(full);
    };
    auto [value, tangent] = jvp(g, primals, prim_tangents);
    auto shifted = [&](double h) {
      std::vector<Tensor> moved = in;
      for (size_t i = 0; i < in.size(); ++i)
        if (tangents[i].defined()) moved[i] = in[i] + h * tangents[i];
      return f(moved);
    };
    Tensor fd = (shifted(kStep) - shifted(-kStep)) / (2 * kStep);
    EXPECT_LE(mismatch(value, f(in), 1e-12, 1e-12), 1.0) << op.name;
    EXPECT_LE(mismatch(tangent, fd, 1e-5, 1e-6), 1.0) << op.name << " case " << c;
  }
}

// Forward mode with batched tangents (an extra axis "__b": three JVPs in one sweep, what the
// forward-mode jacobian uses) equals one JVP per index of the batch axis; an op that declares
// it cannot take batch axes says so.
TEST_P(EveryOp, BatchedJvpEqualsOneJvpPerTangent) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  if (!op.jvp) GTEST_SKIP() << op.name << " has a bool output: not differentiable by design";
  const int64_t nb = 3;
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(4500 * c + 9);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> primals, batched;
    std::vector<int> map;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (is_floating(s.inputs[i].dtype())) {
        primals.push_back(scramble(s.inputs[i], rng));
        map.push_back(int(i));
        const bool give = differentiable_input(op, primals.back(), int(i)) && (rng() % 4 != 0 || i == 0);
        Axes ax = primals.back().axes();
        ax.push_back({"__b", nb});
        batched.push_back(give ? scramble(randn(ax, rng()), rng) : Tensor());
      }
    auto g = [&](const std::vector<Tensor>& p) {
      std::vector<Tensor> full = s.inputs;
      for (size_t k = 0; k < p.size(); ++k) full[static_cast<size_t>(map[k])] = p[k];
      return run(op, full, s.attrs);
    };
    bool any = false;
    for (const Tensor& t : batched) any |= t.defined();
    if (!any) continue;
    if (!op.batched_jvp) {
      EXPECT_MESSAGE(testing::error_message<AutodiffError>([&] { (void)jvp(g, primals, batched); }),
                     std::string("[jvp] the JVP of '") + op.name + "' cannot take the batch axes");
      continue;
    }
    Tensor together = jvp(g, primals, batched).second;
    ASSERT_TRUE(together.has_axis("__b"))
        << op.name << " lost the batch axis: " << together.axes().describe();
    for (int64_t b = 0; b < nb; ++b) {
      std::vector<Tensor> one;
      for (const Tensor& t : batched) one.push_back(t.defined() ? select(t, "__b", b) : Tensor());
      Tensor alone = jvp(g, primals, one).second;
      EXPECT_LE(mismatch(select(together, "__b", b), alone, 1e-12, 1e-12), 1.0)
          << op.name << " case " << c << " b " << b;
    }
  }
}

// A cotangent with a batch axis (what jacobian sends through in one sweep) gives, per index, the
// gradient a single cotangent gives; ops that cannot take batch axes say so, naming themselves.
TEST_P(EveryOp, BatchedVjpEqualsOneVjpPerCotangent) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  if (!op.vjp) GTEST_SKIP() << op.name << " has a bool output: not differentiable by design";
  const int64_t nb = 3;
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(4700 * c + 13);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> in;
    for (const Tensor& t : s.inputs) in.push_back(scramble(t, rng));
    Tape tape;
    std::vector<Tensor> watched, wrt;
    for (size_t i = 0; i < in.size(); ++i) {
      watched.push_back(differentiable_input(op, in[i], int(i)) ? tape.watch(in[i]) : in[i]);
      if (differentiable_input(op, in[i], int(i))) wrt.push_back(watched.back());
    }
    if (wrt.empty()) continue;
    Tensor y = run(op, watched, s.attrs);
    Axes ax = y.axes();
    ax.push_back({"__b", nb});
    Tensor w = scramble(randn(ax, rng()), rng);
    if (!op.batched_vjp) {
      EXPECT_MESSAGE(testing::error_message<AutodiffError>([&] { (void)tape.gradient(y, wrt, w); }),
                     std::string("[grad] the VJP of '") + op.name + "' cannot take the batch axes");
      continue;
    }
    const std::vector<Tensor> together = tape.gradient(y, wrt, w);
    for (int64_t b = 0; b < nb; ++b) {
      const std::vector<Tensor> alone = tape.gradient(y, wrt, select(w, "__b", b));
      for (size_t k = 0; k < wrt.size(); ++k) {
        ASSERT_TRUE(together[k].has_axis("__b")) << op.name << " input " << k;
        EXPECT_LE(mismatch(select(together[k], "__b", b), alone[k], 1e-12, 1e-12), 1.0)
            << op.name << " case " << c << " b " << b << " input " << k;
      }
    }
  }
}

// Every op inside a compiled scan: the body applies the op to the inputs scaled by the carry (1 at
// every step), so the later steps replay the captured kernel calls of the first; each step's
// output, and the gradient through the replayed steps, equals the op run eagerly.
TEST_P(EveryOp, ReplayedInsideAScanEqualsEager) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  const int64_t steps = 4;
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(5500 * c + 7);
    OpSample s = op.sample(rng, DType::f64);
    const Tensor eager = run(op, s.inputs, s.attrs);
    auto body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>&) {
      std::vector<Tensor> in;
      for (const Tensor& t : s.inputs) in.push_back(is_floating(t.dtype()) ? t * carry[0] : t);
      Tensor y = run(op, in, s.attrs);
      if (y.dtype() == DType::b8) y = where(y, scalar(1.0), scalar(0.0));
      return std::make_pair(std::vector<Tensor>{carry[0] * 1.0}, std::vector<Tensor>{y});
    };
    ScanOptions o;
    o.length = steps;
    const ScanResult r = scan(body, {scalar(1.0)}, {}, "__t", o);
    const Tensor want = eager.dtype() == DType::b8 ? where(eager, scalar(1.0), scalar(0.0)) : eager;
    for (int64_t k = 0; k < steps; ++k)
      EXPECT_LE(mismatch(select(r.ys[0], "__t", k), want, 1e-12, 1e-12), 1.0) << op.name << " case " << c
                                                                              << " step " << k;
    if (!op.vjp) continue;
    // d/ds Σ_t Σ y_t(s · inputs) at s = 1, through the replayed reverse steps, against the eager
    // op's VJP: Σ_t <1, J · inputs> = steps · Σ_i <∇_i Σ y, input_i> over the floating inputs.
    const Tensor weights = randn(eager.axes(), rng());
    const Tensor dscan = grad(
        [&](const std::vector<Tensor>& p) {
          return sum(scan(body, {p[0]}, {}, "__t", o).ys[0] * weights);
        },
        {scalar(1.0)})[0];
    std::vector<Tensor> floating;
    std::vector<int> where_floating;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (is_floating(s.inputs[i].dtype())) {
        floating.push_back(s.inputs[i]);
        where_floating.push_back(int(i));
      }
    const Tensor dscale = grad(
        [&](const std::vector<Tensor>& p) {
          std::vector<Tensor> in = s.inputs;
          for (size_t k = 0; k < floating.size(); ++k) in[size_t(where_floating[k])] = floating[k] * p[0];
          return sum(run(op, in, s.attrs) * weights);
        },
        {scalar(1.0)})[0];
    EXPECT_NEAR(dscan.item(), double(steps) * dscale.item(), 1e-9 * (1.0 + std::abs(dscan.item())))
        << op.name << " case " << c;
  }
}

// Every op through compile: the second and third calls replay the captured forward, reverse and
// tangent programs on new inputs (scaled by a per-call factor) and give the eager op's value, VJP
// and JVP.
TEST_P(EveryOp, CompiledEqualsEager) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(6100 * c + 3);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<int> floating;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (differentiable_input(op, s.inputs[i], int(i))) floating.push_back(int(i));
    auto apply_op = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{run(op, in, s.attrs)}; };
    const CompiledFunction f = compile(apply_op);
    for (int call = 0; call < 3; ++call) {
      std::vector<Tensor> in = s.inputs;
      for (int i : floating) in[size_t(i)] = s.inputs[size_t(i)] * (1.0 + 0.25 * call);
      const Tensor want = run(op, in, s.attrs), got = f(in)[0];
      EXPECT_LE(mismatch(got, want, 1e-14, 1e-14), 1.0) << op.name << " case " << c << " call " << call;
      if (!op.vjp || floating.empty()) continue;
      const Tensor w = randn(want.axes(), rng());
      auto loss = [&](bool compiled) {
        return [&, compiled](const std::vector<Tensor>& p) {
          std::vector<Tensor> x = in;
          for (size_t k = 0; k < floating.size(); ++k) x[size_t(floating[k])] = p[k];
          return sum((compiled ? f(x)[0] : run(op, x, s.attrs)) * w);
        };
      };
      std::vector<Tensor> at;
      for (int i : floating) at.push_back(in[size_t(i)]);
      const std::vector<Tensor> g = grad(loss(true), at), e = grad(loss(false), at);
      for (size_t k = 0; k < at.size(); ++k)
        EXPECT_LE(mismatch(g[k], e[k], 1e-13, 1e-13), 1.0) << op.name << " case " << c << " call " << call << " input " << k;
      if (!op.jvp) continue;
      std::vector<Tensor> tangents;
      for (const Tensor& t : at) tangents.push_back(randn(t.axes(), rng()));
      const Tensor jc = jvp(loss(true), at, tangents).second, je = jvp(loss(false), at, tangents).second;
      EXPECT_NEAR(jc.item(), je.item(), 1e-12 * (1.0 + std::abs(je.item()))) << op.name << " case " << c << " call " << call;
    }
    EXPECT_LE(f.stats().traces, 3) << op.name;  // untracked, reverse mode, forward mode
  }
}

// The batching rule through nmap: with an axis "w" mapped, every op on inputs that carry w (or, at
// random, do not: a per-slice constant) equals the loop over w's slices, stacked.
TEST_P(EveryOp, NmapEqualsPerSliceLoop) {
  const OpDef& op = *GetParam();
  SKIP_COMPLEX_FAMILY(op);
  const int64_t slices = 3;
  for (int c = 0; c < kCasesPerOp; ++c) {
    std::mt19937_64 rng(5000 * c + 11);
    OpSample s = op.sample(rng, DType::f64);
    std::vector<Tensor> in;
    std::vector<bool> mapped;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const Tensor& t = s.inputs[i];
      // Scaling by 1, 1.1, 1.2 keeps every sampler's domain (positive, SPD, well conditioned).
      const bool m = is_floating(t.dtype()) && (i == 0 || rng() % 3 != 0);
      std::vector<Tensor> parts;
      if (m)
        for (int64_t k = 0; k < slices; ++k) parts.push_back(t * (1.0 + 0.1 * double(k)));
      in.push_back(m ? scramble(stack(parts, "w"), rng) : t);
      mapped.push_back(m);
    }
    if (!is_floating(s.inputs[0].dtype()) && !mapped[1]) continue;  // nothing mapped in this case
    Tensor out = nmap([&](const std::vector<Tensor>& p) { return run(op, p, s.attrs); }, {"w"}, in);
    std::vector<Tensor> per;
    for (int64_t k = 0; k < slices; ++k) {
      std::vector<Tensor> slice_in;
      for (size_t i = 0; i < in.size(); ++i) slice_in.push_back(mapped[i] ? select(in[i], "w", k) : in[i]);
      Tensor r = run(op, slice_in, s.attrs);
      per.push_back(r.dtype() == DType::b8 ? where(r, scalar(1.0), scalar(0.0)) : r);
    }
    Tensor expect = stack(per, "w");
    if (out.dtype() == DType::b8) out = where(out, scalar(1.0), scalar(0.0));
    EXPECT_LE(mismatch(out, expect, 1e-12, 1e-12), 1.0) << op.name << " case " << c;
  }
}

TEST(Batching, MappedAxesAreInvisibleToAxisNamingOps) {
  Tensor x = randn(Axes{{"m", 3}, {"i", 4}}, 1);
  detail::MappedScope scope(AxisList{"m"});
  EXPECT_EQ(sum(x).axes().describe(), "(m=3)");  // "all axes" leaves the mapped axis out
  EXPECT_EQ(transpose(x, {"i"}).axes().names().describe(), "(i, m)");
  try {
    (void)sum(x, {"m"});
    FAIL() << "expected AxisError";
  } catch (const AxisError& e) {
    EXPECT_NE(std::string(e.what()).find("[sum] axis 'm' is mapped"), std::string::npos) << e.what();
  }
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] { (void)slice(x, "m", 0, 1); }),
                 "[slice] axis 'm' is mapped by an enclosing nmap/map and invisible inside it");
  EXPECT_MESSAGE(
      testing::error_message<AxisError>([&] { (void)transpose(x, AxisList{}); }),
      "[transpose] order () must name every axis of (m=3, i=4)");  // 'i' is not mapped: must be named
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryOp, ::testing::ValuesIn(registered_ops()),
                         [](const ::testing::TestParamInfo<const OpDef*>& p) {
                           return std::string(p.param->name);
                         });

}  // namespace
}  // namespace tenax
