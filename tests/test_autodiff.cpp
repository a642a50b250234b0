// The tape and the functional API: compact adjoints, seeding, vjp/jvp, composition, threads.
#include <tbb/parallel_for.h>

#include <cmath>

#include "expect_message.h"
#include "op_check.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/sampling.h"

namespace tenax {
namespace {

using testing::mismatch;

// The LSTM-gate pattern (Flux's problem): four slices of one (4h x n) pre-activation. Their
// adjoints must alias ONE buffer of the parent, not one full-size zero tensor per slice.
TEST(CompactAdjoints, FourSlicesShareOneAdjointBuffer) {
  const int64_t h = 5, n = 7;
  Tensor x0 = randn(Axes{{"gate", 4 * h}, {"batch", n}}, 11);
  Tape tape;
  Tensor x = tape.watch(x0);
  Tensor i = slice(x, "gate", 0, h), f = slice(x, "gate", h, 2 * h);
  Tensor g = slice(x, "gate", 2 * h, 3 * h), o = slice(x, "gate", 3 * h, 4 * h);
  Tensor a = sigmoid(i), b = tanh(f);
  Tensor loss = sum(a * b + g * o);
  std::vector<Tensor> grads = tape.gradient(loss, {x});
  TapeStats st = tape.stats();
  // Non-view outputs get their own adjoints: a, b (2 buffers; the loss's is the lent seed,
  // a*b+g*o's the seed broadcast by the sum's rule, lent too, and a*b's and g*o's that same view,
  // lent by the add's rule), plus ONE buffer for x and all four slices. Without aliasing there
  // would be 6 more.
  EXPECT_EQ(st.adjoint_buffers, 3);
  EXPECT_EQ(st.adjoint_bytes, 8 * (2 * h * n + 4 * h * n));
  // Values: d/di = b σ'(i), d/df = a (1 - b²), d/dg = o, d/do = g.
  Tensor av = sigmoid(slice(x0, "gate", 0, h)), bv = tanh(slice(x0, "gate", h, 2 * h));
  Tensor expect = concat({bv * av * (1.0 - av), av * (1.0 - bv * bv), slice(x0, "gate", 3 * h, 4 * h),
                          slice(x0, "gate", 2 * h, 3 * h)},
                         "gate");
  EXPECT_LE(mismatch(grads[0], expect, 1e-12, 1e-14), 1.0);
}

TEST(CompactAdjoints, BroadcastParameterIsReducedWithoutTemporaries) {
  // A bias with no batch axis added to a batch: its gradient sums over the batch in the kernel.
  Tensor bias0 = tensor({1.0, 2.0, 3.0}, "unit");
  Tensor x = randn(Axes{{"batch", 50}, {"unit", 3}}, 3);
  auto f = [&](const std::vector<Tensor>& p) { return sum(square(x + p[0])); };
  auto g = grad(f, {bias0});
  std::vector<double> xs = x.to_vector();
  for (int u = 0; u < 3; ++u) {
    double expect = 0;
    for (int b = 0; b < 50; ++b) expect += 2 * (xs[size_t(b * 3 + u)] + (u + 1));
    EXPECT_NEAR(g[0].at({{"unit", u}}), expect, 1e-10);
  }
}

// The reduction into a broadcast parameter's adjoint over a strided axis (column, with depth
// contiguous) runs whole rows of depth as vectors, column after column: each element's terms
// still added in column order, the bits of a sequential sum. With column contiguous the
// reduction may use partial sums: equal to 1e-12.
TEST(CompactAdjoints, BroadcastReductionAddsTermsInOrder) {
  const int64_t cols = 1000, depth = 7;
  for (bool depth_inner : {true, false}) {
    const Axes ax =
        depth_inner ? Axes{{"column", cols}, {"depth", depth}} : Axes{{"depth", depth}, {"column", cols}};
    Tensor w = randn(ax, 12), x = randn(ax, 13);
    Tensor b0 = randn(Axes{{"depth", depth}}, 14);
    auto f = [&](const std::vector<Tensor>& p) { return sum(w * (x + p[0])); };
    const std::vector<double> g = grad(f, {b0})[0].to_vector();
    for (int64_t d = 0; d < depth; ++d) {
      double ref = 0.0;
      for (int64_t c = 0; c < cols; ++c) ref += w.at({{"column", c}, {"depth", d}});
      if (depth_inner)
        EXPECT_EQ(g[size_t(d)], ref) << "depth " << d;
      else
        EXPECT_NEAR(g[size_t(d)], ref, 1e-12 * (1 + std::abs(ref))) << "depth " << d;
    }
  }
}

// A rule that writes a whole adjoint first gets it uninitialised (no zero fill). Each case below
// mixes that with accumulation; the pool is first filled with NaN blocks of the adjoints' sizes,
// so an element the first rule failed to write would show.
void poison_pool(int64_t n) {
  std::vector<Tensor> junk;
  for (int k = 0; k < 16; ++k) junk.push_back(full(Axes{{"junk", n}}, std::nan(""), DType::f64));
}

TEST(FreshAdjoints, FirstWriterAssignsLaterOnesAccumulate) {
  const int64_t n = 6;
  Tensor x0 = randn(Axes{{"i", n}}, 5), w = randn(Axes{{"i", n}}, 6), b = randn(Axes{{"j", 3}}, 7);
  std::vector<double> xv = x0.to_vector(), wv = w.to_vector();
  auto check = [&](auto f, auto expect) {
    poison_pool(n);
    Tensor g = grad([&](const std::vector<Tensor>& p) { return f(p[0]); }, {x0})[0];
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(g.at({{"i", i}}), expect(size_t(i)), 1e-12) << "element " << i;
  };
  // One op taking x twice (both sides accumulate), and dot(x, x).
  check([](const Tensor& x) { return sum(x * x); }, [&](size_t i) { return 2 * xv[i]; });
  check([](const Tensor& x) { return dot(x, x, AxisList{"i"}); }, [&](size_t i) { return 2 * xv[i]; });
  // x used by two ops: the first rule processed writes, the second adds.
  check([&](const Tensor& x) { return sum(exp(x)) + sum(x * w); },
        [&](size_t i) { return std::exp(xv[i]) + wv[i]; });
  // x and a view of it: the view's adjoint aliases x's, which must then be zeroed.
  check([](const Tensor& x) { return sum(square(x)) + sum(slice(x, "i", 1, 3)); },
        [&](size_t i) { return 2 * xv[i] + (i == 1 || i == 2 ? 1.0 : 0.0); });
  check([](const Tensor& x) { return sum(slice(x, "i", 1, 3)) + sum(square(x)); },
        [&](size_t i) { return 2 * xv[i] + (i == 1 || i == 2 ? 1.0 : 0.0); });
  // A reduction into x (x broadcast over j): the fresh adjoint is zero-filled, then summed into.
  check([&](const Tensor& x) { return sum(x * b); }, [&](size_t) { return sum(b).item(); });
  // A chain where every adjoint is written once.
  check([](const Tensor& x) { return sum(tanh(exp(x) * 2.0)); },
        [&](size_t i) {
          const double t = std::tanh(2 * std::exp(xv[i]));
          return (1 - t * t) * 2 * std::exp(xv[i]);
        });
}

// A sum's (or mean's) rule lends its input the cotangent broadcast over the reduced axes instead of
// writing it out; the tape copies it into a buffer of its own only when another contribution
// arrives, and hands a dense gradient to the caller.
TEST(LentAdjoints, SumAndMeanLendABroadcastThatLaterContributionsDoNotWriteThrough) {
  Tensor x0 = randn(Axes{{"i", 4}, {"j", 3}}, 7);
  {  // a watched variable's lent adjoint comes back dense: grad(sum(x)) = 1, grad(mean(x)) = 1/12
    Tape tape;
    Tensor x = tape.watch(x0);
    Tensor g = tape.gradient(sum(x), {x})[0];
    EXPECT_EQ(tape.stats().adjoint_buffers, 1);  // x's dense copy for the caller (the seed is lent)
    EXPECT_TRUE(g.is_contiguous());
    EXPECT_EQ(g.axes().describe(), x0.axes().describe());
    EXPECT_EQ(g.to_vector(), std::vector<double>(12, 1.0));
    EXPECT_EQ(grad([](const std::vector<Tensor>& p) { return mean(p[0]); }, {x0})[0].to_vector(),
              std::vector<double>(12, 1.0 / 12));
  }
  {  // y = 2x: sum(y) (recorded last, so its rule runs first) lends y its adjoint, then y * y's
     // rule adds 2y to it: d/dx [sum(2x) + sum(4x^2)] = 2 + 8x, and the broadcast ones untouched
    Tape tape;
    Tensor x = tape.watch(x0);
    Tensor y = 2.0 * x;
    Tensor sq = sum(y * y);
    Tensor lin = sum(y);
    Tensor g = tape.gradient(lin + sq, {x})[0];
    EXPECT_LE(mismatch(g, 2.0 + 8.0 * x0, 1e-12, 1e-14), 1.0);
  }
  {  // the caller's cotangent is lent as the seed: never written, and never handed back as a gradient
    Tape tape;
    Tensor x = tape.watch(x0);
    Tensor cot = randn(x0.axes(), 9);
    const std::vector<double> before = cot.to_vector();
    Tensor gx = tape.gradient(x, {x}, cot)[0];
    EXPECT_NE(gx.data_ptr(), cot.data_ptr());
    EXPECT_EQ(gx.to_vector(), before);
    Tensor y = exp(x);
    Tensor gy = tape.gradient(y + y, {x}, cot)[0];  // y taken twice: both contributions add up
    EXPECT_LE(mismatch(gy, 2.0 * cot * exp(x0), 1e-14, 1e-15), 1.0);
    EXPECT_EQ(cot.to_vector(), before);
  }
  {  // over one axis with a batched cotangent: x̄[i, j, k] = w[j, k] / 4 for mean over i
    Tensor w = randn(Axes{{"k", 2}, {"j", 3}}, 8);
    VjpResult r = vjp([](const std::vector<Tensor>& p) { return mean(p[0], {"i"}); }, {x0});
    Tensor g = r.pullback(w)[0];
    EXPECT_TRUE(g.is_contiguous());
    EXPECT_LE(mismatch(g, broadcast(w * 0.25, Axes{{"i", 4}}), 1e-15, 1e-15), 1.0);
  }
}

// The adjoint of a large tensor reached through selects is zeroed only in the selected slices
// (TapeStats::partial_adjoints); whatever else reads or adds to it zeroes the rest first. Each
// gradient against its closed form, with the unwritten memory poisoned beforehand (the pool hands
// back the same buffer) so that a slice left unwritten shows.
TEST(PartialAdjoints, OnlySelectedSlicesAreZeroedAndEverythingElseSeesZeros) {
  const int64_t T = 40, J = 256;  // 80 KiB of float64
  const Tensor x0 = randn(Axes{{"t", T}, {"j", J}}, 3), w = randn(Axes{{"j", J}}, 4);
  // d/dx of Σ_j w_j Σ_{i in idx} x[i, j] (+ Σ x·x when `whole`): w in the selected rows (times
  // their multiplicity), plus 2x.
  auto expected = [&](const std::vector<int64_t>& idx, bool whole) {
    std::vector<double> g(static_cast<size_t>(T * J), 0.0);
    const std::vector<double> xv = x0.to_vector(), wv = w.to_vector();
    for (int64_t i : idx)
      for (int64_t j = 0; j < J; ++j) g[static_cast<size_t>(i * J + j)] += wv[static_cast<size_t>(j)];
    if (whole)
      for (size_t k = 0; k < g.size(); ++k) g[k] += 2 * xv[k];
    return g;
  };
  struct Case {
    const char* what;
    std::vector<int64_t> idx;
    bool whole, through_views;
  };
  const Case cases[] = {{"one select", {39}, false, false},
                        {"two selects apart (the slices between zeroed)", {3, 30}, false, false},
                        {"a select taken twice and one below", {7, 7, 2}, false, false},
                        {"through a rename and a transpose", {12, 20}, false, true},
                        {"then a rule reads x whole", {5}, true, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    {  // poison: a freed buffer of the adjoint's size comes back from the pool
      Tensor junk = full(x0.axes(), std::nan(""));
      (void)junk;
    }
    Tape tape;
    const Tensor x = tape.watch(x0);
    const Tensor v = c.through_views ? transpose(rename(x, "t", "time"), {"j", "time"}) : x;
    const Name axis = c.through_views ? Name("time") : Name("t");
    Tensor loss = scalar(0.0);
    for (int64_t i : c.idx) loss = loss + sum(select(v, axis, i) * w);
    if (c.whole) loss = sum(x * x) + loss;  // recorded first, so its rule runs after the selects'
    const Tensor g = tape.gradient(loss, {x})[0];
    EXPECT_LT(mismatch(g, tensor(expected(c.idx, c.whole), x0.axes()), 1e-13, 1e-13), 1.0);
    EXPECT_EQ(tape.stats().partial_adjoints, 0);  // a watched tensor's gradient is handed out whole
  }
  // A select of a small tensor zeroes it whole, as before.
  Tape tape;
  const Tensor y = tape.watch(randn(Axes{{"t", 4}, {"j", 3}}, 5));
  EXPECT_EQ(tape.gradient(sum(select(y, "t", 1)), {y})[0].to_vector(),
            (std::vector<double>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(Grad, UnusedArgumentGetsZeros) {
  auto f = [](const std::vector<Tensor>& p) { return sum(exp(p[0])); };
  auto g = grad(f, {tensor({0.0, 1.0}, "i"), tensor({5.0}, "j")});
  EXPECT_EQ(g[1].to_vector(), std::vector<double>({0.0}));
  EXPECT_NEAR(g[0].at({{"i", 1}}), std::exp(1.0), 1e-12);
}

TEST(Grad, RepeatedUseAccumulates) {
  auto f = [](const std::vector<Tensor>& p) { return sum(p[0] * p[0] * p[0]); };
  auto g = grad(f, {tensor({2.0, -1.0}, "i")});
  EXPECT_EQ(g[0].to_vector(), std::vector<double>({12.0, 3.0}));
}

TEST(Grad, NonScalarOutputIsAnError) {
  auto f = [](const std::vector<Tensor>& p) { return exp(p[0]); };
  try {
    (void)grad(f, {tensor({1.0, 2.0}, "i")});
    FAIL() << "expected AutodiffError";
  } catch (const AutodiffError& e) {
    EXPECT_NE(std::string(e.what()).find("(i=2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vjp"), std::string::npos) << e.what();
  }
}

TEST(Grad, UnwatchedTensorIsAnError) {
  Tape tape;
  Tensor x = tensor({1.0}, "i");
  Tensor y = sum(exp(x));
  EXPECT_MESSAGE(
      testing::error_message<AutodiffError>([&] { (void)tape.gradient(y, {x}); }),
      "[grad] a tensor to differentiate with respect to (i=1) is not tracked by this tape; watch it");
}

TEST(Vjp, CotangentInAnyAxisOrder) {
  Tensor a = randn(Axes{{"i", 3}, {"j", 4}}, 1), b = randn(Axes{{"j", 4}, {"k", 2}}, 2);
  auto f = [](const std::vector<Tensor>& p) { return dot(p[0], p[1], {"j"}); };
  VjpResult r = vjp(f, {a, b});
  Tensor w = randn(Axes{{"k", 2}, {"i", 3}}, 3);  // transposed relative to the value (i, k)
  std::vector<Tensor> g = r.pullback(w);
  // d<w, a·b>/da = w·bᵀ, d/db = aᵀ·w.
  EXPECT_LE(mismatch(g[0], dot(w, b, {"k"}), 1e-12, 1e-14), 1.0);
  EXPECT_LE(mismatch(g[1], dot(a, w, {"i"}), 1e-12, 1e-14), 1.0);
  // The pullback can be called again (the tape is kept, adjoints are fresh).
  std::vector<Tensor> g2 = r.pullback(w);
  EXPECT_LE(mismatch(g2[0], g[0], 1e-15, 1e-15), 1.0);
}

// A Gaussian log-density through cholesky, triangular_solve and a log-determinant: forward mode
// and reverse mode agree (<w, J v> two ways), and the gradient matches finite differences.
Tensor gaussian_logpdf(const Tensor& cov, const Tensor& x) {
  Tensor l = cholesky(cov, "i", "j");
  Tensor z = triangular_solve(l, x, "i", "j");  // z over j
  return -0.5 * sum(square(z)) - 0.5 * sum(logdet(cov, "i", "j"));
}

TEST(Composite, ForwardAndReverseModeAgreeOnAGaussianDensity) {
  std::mt19937_64 rng(5);
  Tensor cov = detail::random_spd(rng, "i", "j", 4, Axes{{"series", 3}}, DType::f64);
  Tensor x = randn(Axes{{"series", 3}, {"i", 4}}, 6);
  auto f = [](const std::vector<Tensor>& p) { return gaussian_logpdf(p[0], p[1]); };
  Tensor vc = randn(cov.axes(), 7), vx = randn(x.axes(), 8);
  vc = vc + rename(vc, AxisList{"i", "j"}, AxisList{"j", "i"});  // symmetric direction
  auto [value, tangent] = jvp(f, {cov, x}, {vc, vx});
  auto [value2, grads] = value_and_grad(f, {cov, x});
  EXPECT_DOUBLE_EQ(value.item(), value2.item());
  const double reverse = sum(grads[0] * vc).item() + sum(grads[1] * vx).item();
  EXPECT_NEAR(tangent.item(), reverse, 1e-9 * (1 + std::fabs(reverse)));
  const double h = 1e-6;
  const double fd = (f({cov + h * vc, x + h * vx}).item() - f({cov - h * vc, x - h * vx}).item()) / (2 * h);
  EXPECT_NEAR(reverse, fd, 1e-6 * (1 + std::fabs(fd)));
}

TEST(Composite, SmallLinearAlgebraGradientsMatchFiniteDifferencesAtEverySize) {
  // Sizes 1..4 run the host's unrolled fixed-size Cholesky, its reverse rule and triangular
  // solves; 5 the general loops. Loss through all three, against central differences.
  std::mt19937_64 rng(11);
  for (int n = 1; n <= 5; ++n) {
    const Tensor a = contiguous(detail::random_spd(rng, "r", "c", n, Axes{}, DType::f64));
    const Tensor b = randn(Axes{{"r", n}, {"k", 2}}, 20 + n);
    auto f = [](const std::vector<Tensor>& v) {
      const Tensor l = cholesky(v[0], "r", "c");
      const Tensor z = triangular_solve(l, v[1], "r", "c", Triangle::lower, Transpose::no);
      return sum(z * z) + sum(l * l * 0.3);
    };
    const std::vector<Tensor> g = grad(f, {a, b});
    for (size_t k = 0; k < 2; ++k)
      for (int64_t i = 0; i < g[k].numel(); ++i) {
        const double h = 1e-6;
        auto [p, m] = testing::nudged({a, b}, k, i, h);
        const double fd = (f(p).item() - f(m).item()) / (2 * h);
        EXPECT_NEAR(testing::get_flat(g[k], i), fd, 1e-6 * (1 + std::abs(fd)))
            << "n=" << n << " argument " << k << " element " << i;
      }
  }
}

TEST(Composite, GradientThroughViewsOfViews) {
  Tensor x0 = randn(Axes{{"a", 6}, {"b", 5}}, 21);
  auto f = [](const std::vector<Tensor>& p) {
    Tensor t = transpose(p[0], {"b", "a"});
    Tensor s = slice(t, "a", 1, 6, 2);       // a = 1, 3, 5
    Tensor r = select(rename(s, "b", "c"), "c", 2);
    return sum(square(r)) + sum(p[0]);
  };
  auto g = grad(f, {x0});
  for (int a = 0; a < 6; ++a)
    for (int b = 0; b < 5; ++b) {
      double expect = 1.0 + ((b == 2 && a % 2 == 1) ? 2 * x0.at({{"a", a}, {"b", b}}) : 0.0);
      EXPECT_NEAR(g[0].at({{"a", a}, {"b", b}}), expect, 1e-12);
    }
}

TEST(Tape, NestedTapeTreatsOuterVariablesAsConstants) {
  Tape outer;
  Tensor x = outer.watch(tensor({3.0}, "i"));
  Tensor y = x * x;
  {
    Tape inner;
    Tensor z = inner.watch(tensor({2.0}, "i"));
    Tensor w = sum(y * z);  // y is a constant for the inner tape
    auto g = inner.gradient(w, {z});
    EXPECT_DOUBLE_EQ(g[0].item(), 9.0);
  }
  auto g = outer.gradient(sum(y), {x});  // the outer tape records again after the inner one ends
  EXPECT_DOUBLE_EQ(g[0].item(), 6.0);
}

TEST(Tape, ValuesFromAFinishedTapeAreConstants) {
  auto [value, g] = value_and_grad([](const std::vector<Tensor>& p) { return sum(p[0] * 2.0); },
                                   {tensor({1.0, 2.0}, "i")});
  auto g2 = grad([&](const std::vector<Tensor>& p) { return sum(p[0] * value); }, {scalar(1.0)});
  EXPECT_DOUBLE_EQ(g2[0].item(), 6.0);
}

TEST(Tape, ReportsResidualBytes) {
  Tape tape;
  Tensor x = tape.watch(randn(Axes{{"i", 100}}, 1));
  Tensor y = exp(x);        // saves its output: 800 bytes
  Tensor z = sum(y + 1.0);  // add and sum save nothing
  EXPECT_EQ(tape.stats().records, 3);
  EXPECT_EQ(tape.stats().residual_bytes, 800);
  EXPECT_GE(tape.bytes(), 800);
  (void)z;
}

// Tapes are per thread: tasks record and differentiate independently, and get the serial results.
// ---- custom_vjp: a user's reverse rule, tested like an op ----

// softplus with the rule g * sigmoid(x): the rule is what the gradient uses (scaling it shows),
// and it matches finite differences.
std::vector<Tensor> softplus_custom(const std::vector<Tensor>& in, double rule_scale = 1.0) {
  return custom_vjp(
      "my_softplus", [](const std::vector<Tensor>& x) { return std::vector<Tensor>{log1p(exp(x[0]))}; },
      [rule_scale](const std::vector<Tensor>& x, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{g[0] * sigmoid(x[0]) * rule_scale};
      },
      in);
}

TEST(CustomVjp, TheRuleGivesTheGradientAndMatchesFiniteDifferences) {
  const Tensor x0 = randn(Axes{{"i", 5}, {"j", 3}}, 4);
  const Tensor w = randn(Axes{{"j", 3}, {"i", 5}}, 5);
  auto f = [&](const std::vector<Tensor>& p) { return sum(softplus_custom(p)[0] * w); };
  const Tensor g = grad(f, {x0})[0];
  EXPECT_LE(mismatch(g, w * sigmoid(x0), 1e-14, 1e-14), 1.0);
  for (int64_t k = 0; k < x0.numel(); ++k) {
    auto [up, down] = testing::nudged({x0}, 0, k, 1e-6);
    const double fd = (f(up).item() - f(down).item()) / 2e-6;
    EXPECT_NEAR(testing::get_flat(g, k), fd, 1e-7) << k;
  }
  // The rule, not the forward's ops, is differentiated.
  const Tensor doubled = grad([&](const std::vector<Tensor>& p) { return sum(softplus_custom(p, 2.0)[0] * w); },
                              {x0})[0];
  EXPECT_LE(mismatch(doubled, g * 2.0, 1e-14, 1e-14), 1.0);
  // Without a tracked input nothing is recorded and the forward's value comes back.
  EXPECT_LE(mismatch(softplus_custom({x0})[0], softplus(x0), 1e-14, 1e-14), 1.0);
}

TEST(CustomVjp, SeveralInputsAndOutputsJacobianAndNmap) {
  // (a, b) -> (a b, a + b) with b broadcast along i.
  auto f2 = [](const std::vector<Tensor>& in) {
    return custom_vjp(
        "product_and_sum", [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0] * x[1], x[0] + x[1]}; },
        [](const std::vector<Tensor>& x, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
          Tensor ga = g[0].defined() ? g[0] * x[1] : zeros(x[0].axes());
          Tensor gb = g[0].defined() ? sum(g[0] * x[0], {"i"}) : zeros(x[1].axes());
          if (g[1].defined()) {
            ga = ga + g[1];
            gb = gb + sum(g[1], {"i"});
          }
          return std::vector<Tensor>{ga, gb};
        },
        in);
  };
  const Tensor a = randn(Axes{{"i", 4}, {"j", 2}}, 1), b = randn(Axes{{"j", 2}}, 2);
  auto loss = [&](const std::vector<Tensor>& p) {
    const std::vector<Tensor> y = f2(p);
    return sum(square(y[0])) + sum(y[1] * 3.0);
  };
  auto reference = [&](const std::vector<Tensor>& p) { return sum(square(p[0] * p[1])) + sum((p[0] + p[1]) * 3.0); };
  const std::vector<Tensor> g = grad(loss, {a, b}), want = grad(reference, {a, b});
  for (int k = 0; k < 2; ++k) EXPECT_LE(mismatch(g[k], want[k], 1e-13, 1e-13), 1.0) << k;
  // jacobian: the batched cotangent goes through the rule one row at a time.
  const Function first = [&](const std::vector<Tensor>& p) { return f2(p)[0]; };
  const Function first_ref = [&](const std::vector<Tensor>& p) { return p[0] * p[1]; };
  const std::vector<Tensor> jac = jacobian(first, {a, b}), jac_ref = jacobian(first_ref, {a, b});
  for (int k = 0; k < 2; ++k) EXPECT_LE(mismatch(jac[k], jac_ref[k], 1e-13, 1e-13), 1.0) << k;
  // Inside nmap over i: the rule runs with i mapped, like the forward.
  const Tensor x = randn(Axes{{"i", 4}, {"j", 3}}, 7);
  const Tensor gn = grad(
      [&](const std::vector<Tensor>& p) {
        return sum(nmap([&](const std::vector<Tensor>& q) { return sum(softplus_custom(q)[0]); }, {"i"}, p));
      },
      {x})[0];
  EXPECT_LE(mismatch(gn, sigmoid(x), 1e-14, 1e-14), 1.0);
}

TEST(CustomVjp, MisuseNamesTheFunction) {
  const Tensor x = randn(Axes{{"i", 3}}, 1);
  auto forward = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{v[0] * 2.0}; };
  auto rule_of = [&](CustomVjpRule rule) {
    return [=](const std::vector<Tensor>& p) { return sum(custom_vjp("twice", forward, rule, p)[0]); };
  };
  EXPECT_MESSAGE(testing::error_message<AutodiffError>([&] {
                   (void)grad(rule_of([](auto&, auto&, auto&) { return std::vector<Tensor>{}; }), {x});
                 }),
                 "[custom_vjp 'twice'] the VJP rule returned 0 cotangents for 1 inputs");
  EXPECT_MESSAGE(testing::error_message<AutodiffError>([&] {
                   (void)grad(rule_of([](auto&, auto&, auto&) { return std::vector<Tensor>{zeros(Axes{{"q", 3}})}; }),
                              {x});
                 }),
                 "[custom_vjp 'twice'] the VJP rule's cotangent of input 0 has axes (q=3); the input has (i=3)");
  EXPECT_MESSAGE(testing::error_message<AutodiffError>([&] {
                   (void)jvp(rule_of([](auto&, auto&, auto& g) { return std::vector<Tensor>{g[0] * 2.0}; }), {x},
                             {ones(x.axes())});
                 }),
                 "[jvp] forward mode through twice");
  ScanOptions o;
  o.length = 2;
  EXPECT_MESSAGE(testing::error_message<Error>([&] {
                   (void)grad(
                       [&](const std::vector<Tensor>& p) {
                         auto body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
                           const std::vector<Tensor> y = custom_vjp(
                               "twice", forward, [](auto&, auto&, auto& g) { return std::vector<Tensor>{g[0] * 2.0}; },
                               {c[0]});
                           return std::make_pair(y, std::vector<Tensor>{});
                         };
                         return sum(scan(body, {p[0]}, {}, "t", o).carry[0]);
                       },
                       {x});
                 }),
                 "[twice] inside a scan body (traced once, then replayed) is not supported yet");
}

TEST(Threads, IndependentTapesPerTask) {
  const int tasks = 64;
  auto work = [](int k) {
    Tensor p = tensor({0.1 * k, 1.0 + 0.01 * k}, "i");
    auto f = [](const std::vector<Tensor>& a) { return logsumexp(a[0] * a[0]) + sum(tanh(a[0])); };
    auto [v, g] = value_and_grad(f, {p});
    std::vector<double> out = g[0].to_vector();
    out.push_back(v.item());
    return out;
  };
  std::vector<std::vector<double>> serial(tasks), parallel(tasks);
  for (int k = 0; k < tasks; ++k) serial[size_t(k)] = work(k);
  tbb::parallel_for(0, tasks, [&](int k) { parallel[size_t(k)] = work(k); });
  for (int k = 0; k < tasks; ++k) EXPECT_EQ(serial[size_t(k)], parallel[size_t(k)]) << k;
}

// ---- records by value: small contiguous elementwise calls (autodiff/tape_lane.cpp) ----------

// Gradients of sum(op(in) * w) with respect to the inputs marked in `watch`, and how many records
// the tape kept by value. With `tensor_rules` the sweep runs the ops' tensor rules on copies of the
// residuals (as it does under the finite checks), which is the reference here.
std::vector<Tensor> weighted_grads(const OpDef& op, const std::vector<Tensor>& in, const std::vector<bool>& watch,
                                   const Tensor& w, bool tensor_rules, int64_t& by_value) {
  const bool was = check_finite();
  set_check_finite(tensor_rules);
  Tape tape;
  std::vector<Tensor> args, wrt;
  for (size_t i = 0; i < in.size(); ++i) {
    args.push_back(watch[i] ? tape.watch(in[i]) : in[i]);
    if (watch[i]) wrt.push_back(args.back());
  }
  std::vector<Tensor> g = tape.gradient(sum(detail::apply(op, args, detail::kNoAttrs) * w), wrt);
  by_value = tape.stats().records_by_value;
  set_check_finite(was);
  return g;
}

// A sample of `op` whose operands all have the same axes (contiguous, a few elements).
std::vector<Tensor> same_axes_sample(const OpDef& op, DType dt) {
  for (uint64_t seed = 1;; ++seed) {
    std::mt19937_64 rng(seed);
    OpSample s = op.sample(rng, dt);
    bool same = true;
    for (const Tensor& t : s.inputs) same = same && t.axes() == s.inputs[0].axes() && t.rank() > 0;
    if (same) return s.inputs;
  }
}

TEST(RecordsByValue, EveryOpWithARuleByValueMatchesItsTensorRuleAndFiniteDifferences) {
  int ops = 0;
  for (const OpDef* op : registered_ops()) {
    if (!op->lane) continue;
    ++ops;
    for (DType dt : {DType::f64, DType::f32}) {
      const std::vector<Tensor> in = same_axes_sample(*op, dt);
      const Tensor w = randn(in[0].axes(), 17, dt);
      const std::vector<bool> all(in.size(), true);
      int64_t lane = 0, tensor = 0;
      const std::vector<Tensor> g = weighted_grads(*op, in, all, w, false, lane);
      const std::vector<Tensor> e = weighted_grads(*op, in, all, w, true, tensor);
      EXPECT_EQ(lane, 2) << op->name;  // the op and the weighting's mul
      EXPECT_EQ(tensor, 2) << op->name;
      const double tol = dt == DType::f64 ? 1e-15 : 1e-6;
      for (size_t k = 0; k < in.size(); ++k)
        EXPECT_LE(mismatch(g[k], e[k], tol, tol), 1.0) << op->name << " input " << k << " " << dtype_name(dt);
      if (dt != DType::f64) continue;
      for (size_t k = 0; k < in.size(); ++k)
        for (int64_t i = 0; i < in[k].numel(); ++i) {
          const double x0 = testing::get_flat(in[k], i), h = 1e-6;
          auto f = [&](double x) {
            testing::set_flat(in[k], i, x);
            return sum(detail::apply(*op, in, detail::kNoAttrs) * w).item();
          };
          const double fd = (f(x0 + h) - f(x0 - h)) / (2 * h);
          testing::set_flat(in[k], i, x0);
          EXPECT_NEAR(testing::get_flat(g[k], i), fd, 1e-6 + 1e-6 * std::fabs(fd)) << op->name << " input " << k;
        }
    }
  }
  EXPECT_EQ(ops, 17);  // every unary and binary elementwise op of elementwise.def
}

// A single untracked element as an operand (x * 2.0) is broadcast from its one saved value; a
// tracked one needs a sum over the output, so that call keeps tensors.
TEST(RecordsByValue, ASingleElementOperandIsBroadcastFromItsSavedValue) {
  for (const OpDef* op : registered_ops()) {
    if (!op->lane || op->arity != 2) continue;
    for (DType dt : {DType::f64, DType::f32}) {
      std::vector<Tensor> in = same_axes_sample(*op, dt);
      in[1] = full(Axes{}, testing::get_flat(in[1], 0), dt);
      const Tensor w = randn(in[0].axes(), 5, dt);
      int64_t lane = 0, tensor = 0;
      const Tensor g = weighted_grads(*op, in, {true, false}, w, false, lane)[0];
      const Tensor e = weighted_grads(*op, in, {true, false}, w, true, tensor)[0];
      EXPECT_EQ(lane, 2) << op->name;
      const double tol = dt == DType::f64 ? 1e-15 : 1e-6;
      EXPECT_LE(mismatch(g, e, tol, tol), 1.0) << op->name << " " << dtype_name(dt);
      // Both tracked: the scalar's gradient is a sum over the output (a tensor record).
      const std::vector<Tensor> both = weighted_grads(*op, in, {true, true}, w, false, lane);
      const std::vector<Tensor> both_e = weighted_grads(*op, in, {true, true}, w, true, tensor);
      EXPECT_EQ(lane, 1) << op->name;  // the weighting's mul only
      EXPECT_LE(mismatch(both[1], both_e[1], tol, tol), 1.0) << op->name;
    }
  }
}

// An input taken twice, a cotangent lent to an operand and added to later, and the gradient with
// respect to an intermediate whose adjoint was lent on: closed forms.
TEST(RecordsByValue, SharedOperandsAndLentCotangentsAddUpAsClosedFormsSay) {
  const Tensor x0 = tensor({0.5, -1.25, 2.0}, "i");
  Tape tape;
  const Tensor x = tape.watch(x0);
  const Tensor y = x + x;                       // 2x
  const Tensor z = y * y - x * x + (x - x);     // 3x²
  const Tensor loss = sum(z + y);               // 3x² + 2x
  const std::vector<Tensor> g = tape.gradient(loss, {x, y});
  EXPECT_EQ(tape.stats().records_by_value, 7);
  const std::vector<double> xs = x0.to_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    // Through y: d/dy (y² + y) = 2y + 1 (x's own terms do not pass through y).
    EXPECT_DOUBLE_EQ(g[1].to_vector()[i], 2 * (2 * xs[i]) + 1);
    EXPECT_DOUBLE_EQ(g[0].to_vector()[i], 6 * xs[i] + 2);
  }
  // A cotangent held by value (w, not a broadcast) lent to x by y = x + x, then added to by
  // y's second operand: x gets 2w, and y's own adjoint stays w.
  Tape t2;
  const Tensor x2 = t2.watch(x0);
  const Tensor w = tensor({3.0, -1.0, 0.5}, "i");
  const Tensor y2 = x2 + x2;
  const std::vector<Tensor> g2 = t2.gradient(sum(y2 * w), {x2, y2});
  EXPECT_EQ(g2[0].to_vector(), (std::vector<double>{6.0, -2.0, 1.0}));
  EXPECT_EQ(g2[1].to_vector(), w.to_vector());
}

// Records by value and tensor records on one tape: views of a larger tensor (their adjoints are
// views of the parent's), transposes and reductions between small elementwise calls.
TEST(RecordsByValue, MixWithTensorRecordsAndViewsOnOneTape) {
  const Tensor x0 = randn(Axes{{"i", 3}, {"j", 4}}, 21);
  auto f = [](const std::vector<Tensor>& p) {
    const Tensor& x = p[0];
    const Tensor row = select(x, "i", 1);                   // a view: kept as a tensor record
    const Tensor t = contiguous(transpose(x, {"j", "i"}));  // by value again after the copy
    const Tensor a = tanh(x) * x + exp(row) * 0.5;
    return sum(a * a) + sum(t * t * x);
  };
  const Tensor g = grad(f, {x0})[0];
  for (int64_t e = 0; e < x0.numel(); ++e) {
    const double h = 1e-6;
    auto at = [&](double d) {
      Tensor x = x0 + 0.0;
      testing::set_flat(x, e, testing::get_flat(x0, e) + d);
      return f({x}).item();
    };
    const double fd = (at(h) - at(-h)) / (2 * h);
    EXPECT_NEAR(testing::get_flat(g, e), fd, 1e-6 * (1 + std::fabs(fd)));
  }
}

// Sweeps whose rules see tensors — batch axes (jacobian) and the finite checks — run the records
// by value through their tensor rules on copies of the residuals.
TEST(RecordsByValue, JacobiansAndFiniteChecksRunTheTensorRulesOnCopies) {
  const Tensor c = tensor({1.5, -0.5, 2.0}, "i");
  const Tensor x0 = tensor({0.25, 1.0, -2.0}, "i");
  const Tensor jac = jacobian([&](const std::vector<Tensor>& p) { return p[0] * p[0] * c; }, {x0})[0];
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t k = 0; k < 3; ++k) {
      const double want = r == k ? 2 * x0.to_vector()[size_t(r)] * c.to_vector()[size_t(r)] : 0.0;
      EXPECT_DOUBLE_EQ(testing::get_flat(jac, r * 3 + k), want);
    }
  set_check_finite(true);
  const std::string m = testing::error_message<NumericError>(
      [] { (void)grad([](const std::vector<Tensor>& p) { return sum(sqrt(p[0])); }, {tensor({0.0, 1.0}, "i")}); });
  set_check_finite(false);
  EXPECT_MESSAGE(m, "sqrt");
  EXPECT_MESSAGE(m, "backward");
}

// The residuals kept by value are counted like tensors' (an odd float32 count included).
TEST(RecordsByValue, ResidualBytesCountTheValuesKept) {
  Tape tape;
  const Tensor x = tape.watch(tensor(std::vector<float>{0.5F, 1.5F, -1.0F}, Axes{{"i", 3}}));
  const Tensor y = exp(x);  // saves its output: 12 bytes
  const Tensor z = y * x;   // saves both: 24 bytes
  EXPECT_EQ(tape.stats().records_by_value, 2);
  EXPECT_EQ(tape.stats().residual_bytes, 36);
  const Tensor g = tape.gradient(sum(z), {x})[0];  // d/dx x eˣ = (1 + x) eˣ
  const std::vector<double> xs = {0.5, 1.5, -1.0};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(g.to_vector()[i], (1 + xs[i]) * std::exp(xs[i]), 1e-5);
}

}  // namespace
}  // namespace tenax
