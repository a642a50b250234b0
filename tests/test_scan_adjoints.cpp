// Reverse passes through scans that share or leave unwritten what they need not write: add's and
// sub's cotangents lent as adjoints in captured steps, and outputs selected at a few steps seeding
// only those (partial adjoints), against closed forms and the unrolled loop.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "op_check.h"
#include "scan_unrolled.h"
#include "tenax/autodiff/scan_plan.h"

namespace tenax {
namespace {

using testing::decay_body;
using testing::expect_scan_matches_unrolled;
using testing::mismatch;

// The rules of add and sub lend their cotangent as an intermediate's adjoint in a captured reverse
// step (no buffer, no copy), and a contribution added later goes to a copy of its own: on the plan,
// which adjoints share the cotangent's buffer and the values of each; then whole scans whose lent
// adjoints are accumulated into, taken twice, subtracted and chained, against the unrolled loop.
TEST(Scan, AddAndSubLendTheirCotangentsAndCopyOnlyWhereAContributionComes) {
  using detail::ScanPlan;
  // n = a + b with a = c x and b = 2 a: add lends n's cotangent to a and b; b's rule then adds to a.
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor a = c[0] * x[0];
    Tensor b = a * 2.0;
    Tensor n = a + b;
    return std::make_pair(std::vector<Tensor>{n}, std::vector<Tensor>{});
  };
  const Tensor c0 = tensor({0.5, -1.5, 2.0}, "j"), x0 = tensor({3.0, 0.25, -1.0}, "j");
  std::vector<Tensor> carry_out, y_out;
  const auto plan = ScanPlan::trace(body, {c0}, {x0}, 0, carry_out, y_out);
  ASSERT_EQ(plan->ops().size(), 3U);
  const int32_t a = plan->ops()[0].out, b = plan->ops()[1].out, n = plan->ops()[2].out;
  std::vector<Tensor> values(plan->n_vars()), adjoints(plan->n_vars());
  values[0] = c0;
  values[1] = x0;
  plan->forward(values);
  std::vector<char> needs(plan->n_vars(), 1), fresh(plan->n_vars(), 0);
  for (int32_t v = 0; v < static_cast<int32_t>(plan->n_vars()); ++v) plan->allocate(values, adjoints, v, Axes{}, fresh);
  const Tensor g = tensor({1.0, -2.0, 4.0}, "j");
  detail::copy_into(adjoints[static_cast<size_t>(n)], g);
  fresh[static_cast<size_t>(n)] = detail::kWritten;
  plan->backward(values, adjoints, needs, Axes{}, &fresh);
  EXPECT_EQ(adjoints[static_cast<size_t>(b)].data_ptr(), adjoints[static_cast<size_t>(n)].data_ptr());
  EXPECT_EQ(fresh[static_cast<size_t>(b)], detail::kLent);
  EXPECT_NE(adjoints[static_cast<size_t>(a)].data_ptr(), adjoints[static_cast<size_t>(n)].data_ptr());
  EXPECT_EQ(adjoints[static_cast<size_t>(n)].to_vector(), g.to_vector());  // untouched by a's copy
  EXPECT_EQ(adjoints[static_cast<size_t>(a)].to_vector(), (std::vector<double>{3.0, -6.0, 12.0}));
  EXPECT_EQ(adjoints[0].to_vector(), (std::vector<double>{9.0, -1.5, -12.0}));  // 3 g x

  ScanBody taken_twice = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor s = c[0] * x[0];
    return std::make_pair(std::vector<Tensor>{tanh(s + s)}, std::vector<Tensor>{s});
  };
  ScanBody chained = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor d = c[0] * x[0] - c[1] * 0.5;
    Tensor e = (d + x[0]) - c[0];
    Tensor f = e + d * d;  // d lent by the subtraction, then added to by the square
    return std::make_pair(std::vector<Tensor>{tanh(f), d - e}, std::vector<Tensor>{e * f});
  };
  const std::vector<Tensor> init{randn(Axes{{"j", 3}}, 5), randn(Axes{{"j", 3}}, 6)};
  const Tensor xs = randn(Axes{{"t", 6}, {"j", 3}}, 7) * 0.5;
  for (int64_t k : {1, 2}) {
    ScanOptions o;
    o.checkpoint_every = k;
    expect_scan_matches_unrolled(body, {init[0]}, xs, o);
    expect_scan_matches_unrolled(taken_twice, {init[0]}, xs, o);
    expect_scan_matches_unrolled(chained, init, xs, o);
  }
}

// The result is the outputs at a few steps (the final state): the stacked outputs' adjoint is
// zeroed only there (TapeStats::partial_adjoints) and the reverse pass seeds only those steps —
// an output that is also the carry adds its seed, one that is not is zeroed elsewhere; fused
// loops, bisection and devices zero the rest first. Gradients and a Jacobian against the loop
// unrolled on the tape, forwards and in reverse, under checkpoint schedules and bisection, with
// the pool's memory poisoned first so that an unwritten slice read shows.
TEST(Scan, OutputsSelectedAtAFewStepsSeedOnlyThoseSteps) {
  const int64_t T = 48, H = 200;  // each output 75 KiB
  const Tensor lam = uniform(Axes{{"h", H}}, 8, 0.5, 0.95);
  ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = tanh(lam * c[0] + x[0]);
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next, square(next)});
  };
  const Tensor init0 = randn(Axes{{"h", H}}, 9), xs0 = randn(Axes{{"t", T}, {"h", H}}, 10) * 0.5;
  const Tensor w = randn(Axes{{"h", H}}, 11);
  // Σ w·ys0[a] + Σ ys1[b] + Σ ys1[c], from the stacked outputs or from the list of steps' outputs.
  auto loss_of = [&](const std::vector<Tensor>& ys0, const std::vector<Tensor>& ys1, int64_t a, int64_t b, int64_t c) {
    return sum(ys0[static_cast<size_t>(a)] * w) + sum(ys1[static_cast<size_t>(b)]) + sum(ys1[static_cast<size_t>(c)]);
  };
  for (const bool rev : {false, true})
    for (const int64_t k : {int64_t{1}, int64_t{5}, int64_t{0}}) {  // 0: bisection
      SCOPED_TRACE("reverse " + std::to_string(rev) + " schedule " + std::to_string(k));
      ScanOptions o;
      o.reverse = rev;
      o.checkpoint_every = k == 0 ? 1 : k;
      if (k == 0) o.memory_budget = 8 * H * 8;
      const int64_t a = rev ? 0 : T - 1, b = 17, c = 30;
      {
        Tensor junk = full(Axes{{"t", T}, {"h", H}}, std::nan(""));
        (void)junk;
      }
      Tape tape;
      const Tensor init = tape.watch(init0), xs = tape.watch(xs0);
      ScanResult r = scan(body, {init}, {xs}, "t", o);
      std::vector<Tensor> ys0, ys1;
      for (int64_t t = 0; t < T; ++t) {
        ys0.push_back(select(r.ys[0], "t", t));
        ys1.push_back(select(r.ys[1], "t", t));
      }
      const std::vector<Tensor> g = tape.gradient(loss_of(ys0, ys1, a, b, c), {init, xs});
      EXPECT_EQ(tape.stats().partial_adjoints, 2);

      auto unrolled = [&](const std::vector<Tensor>& args) {
        std::vector<Tensor> carry{args[0]}, u0(static_cast<size_t>(T)), u1(static_cast<size_t>(T));
        for (int64_t s = 0; s < T; ++s) {
          const int64_t t = rev ? T - 1 - s : s;
          auto [next, y] = body(carry, {select(args[1], "t", t)});
          u0[static_cast<size_t>(t)] = y[0];
          u1[static_cast<size_t>(t)] = y[1];
          carry = next;
        }
        return loss_of(u0, u1, a, b, c);
      };
      const std::vector<Tensor> g_ref = grad(unrolled, {init0, xs0});
      for (size_t i = 0; i < 2; ++i) EXPECT_LT(mismatch(g[i], g_ref[i], 1e-12, 1e-13), 1.0) << "argument " << i;
    }
  // The final state's Jacobian w.r.t. the initial state (batch axes on the cotangents).
  Function final_state = [&](const std::vector<Tensor>& a) {
    return select(scan(body, {a[0]}, {xs0}, "t").ys[0], "t", T - 1);
  };
  Function final_unrolled = [&](const std::vector<Tensor>& a) {
    std::vector<Tensor> carry{a[0]};
    for (int64_t t = 0; t < T; ++t) carry = body(carry, {select(xs0, "t", t)}).first;
    return carry[0];
  };
  EXPECT_LT(mismatch(jacobian(final_state, {init0})[0], jacobian(final_unrolled, {init0})[0], 1e-12, 1e-13), 1.0);
}

// A scalar scan's steps fuse into loops that read every step's cotangent: its last output selected
// (an adjoint of 80 KB left partial by the tape) is zeroed elsewhere before the loops run.
TEST(Scan, FusedScalarStepsZeroTheCotangentOutsideTheSelectedStep) {
  const int64_t T = 10000;
  const Tensor us = randn(Axes{{"t", T}}, 12) * 0.1;
  {
    Tensor junk = full(Axes{{"t", T}}, std::nan(""));
    (void)junk;
  }
  Tape tape;
  const Tensor lam = tape.watch(scalar(0.9));
  ScanResult r = scan(decay_body(lam), {scalar(0.5)}, {us}, "t");
  const Tensor g = tape.gradient(select(r.ys[0], "t", T - 1), {lam})[0];
  EXPECT_EQ(tape.stats().partial_adjoints, 1);
  // y = x_T^2 with x_t = 0.9 x_{t-1} + u_t: dy/dλ = 2 x_T Σ_t 0.9^(T-1-t) x_{t-1}.
  double x = 0.5, dx = 0.0;
  const std::vector<double> u = us.to_vector();
  for (int64_t t = 0; t < T; ++t) {
    dx = 0.9 * dx + x;
    x = 0.9 * x + u[static_cast<size_t>(t)];
  }
  EXPECT_NEAR(g.item(), 2 * x * dx, 1e-12 * (1 + std::abs(2 * x * dx)));
}

}  // namespace
}  // namespace tenax
