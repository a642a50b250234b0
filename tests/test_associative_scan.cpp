// associative_scan: prefix combinations against a loop (both directions, a length that is not a
// power of two), affine pairs against linear_recurrence with gradients (operand order), and the
// errors.
#include <cmath>
#include <vector>

#include "expect_message.h"
#include "op_check.h"

namespace tenax {
namespace {

using testing::mismatch;

TEST(AssociativeScan, PrefixSumsMatchTheLoopForwardsAndInReverse) {
  // 13 steps (not a power of two) along an inner axis of a (j=2, t=13) tensor.
  Tensor x = randn(Axes{{"j", 2}, {"t", 13}}, 11);
  AssociativeFn add_fn = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    return std::vector<Tensor>{a[0] + b[0]};
  };
  for (bool rev : {false, true}) {
    Tensor r = associative_scan(add_fn, {x}, "t", rev ? ScanDirection::reverse : ScanDirection::forward)[0];
    EXPECT_TRUE(r.axes().same_set(x.axes()));
    for (int j = 0; j < 2; ++j) {
      double acc = 0;
      for (int s = 0; s < 13; ++s) {
        const int t = rev ? 12 - s : s;
        acc += x.at({{"j", j}, {"t", t}});
        EXPECT_NEAR(r.at({{"j", j}, {"t", t}}), acc, 1e-13) << "reverse=" << rev;
      }
    }
  }
}

// Every length from 1 to 40 (odd, even, powers of two and their neighbours), both directions, with
// a non-commutative operator (affine maps composed: order matters) against the serial loop; and the
// work is O(T): the elements combined over all calls of `combine` number at most 2T.
TEST(AssociativeScan, EveryLengthMatchesTheLoopWithLinearWork) {
  int64_t combined = 0;
  AssociativeFn affine = [&combined](const std::vector<Tensor>& p, const std::vector<Tensor>& q) {
    combined += p[0].numel();  // (inside nmap: the pairs of this call, the scanned axis mapped)
    return std::vector<Tensor>{p[0] * q[0], q[0] * p[1] + q[1]};
  };
  for (int64_t n = 1; n <= 40; ++n)
    for (ScanDirection d : {ScanDirection::forward, ScanDirection::reverse}) {
      const Tensor a = uniform(Axes{{"t", n}}, uint64_t(n), 0.5, 1.5), b = randn(Axes{{"t", n}}, uint64_t(100 + n));
      combined = 0;
      const std::vector<Tensor> r = associative_scan(affine, {a, b}, "t", d);
      EXPECT_LE(combined, 2 * n) << "n = " << n;
      const std::vector<double> av = a.to_vector(), bv = b.to_vector(), ra = r[0].to_vector(), rb = r[1].to_vector();
      double pa = 1, pb = 0;  // the composition so far, applied in the scan's order
      for (int64_t s = 0; s < n; ++s) {
        const size_t t = size_t(d == ScanDirection::forward ? s : n - 1 - s);
        if (d == ScanDirection::forward) {
          pb = av[t] * pb + bv[t];
        } else {  // x_t ⊕ (the suffix after t): (a_t, b_t) then (pa, pb)
          pb = pa * bv[t] + pb;
        }
        pa *= av[t];
        EXPECT_NEAR(ra[t], pa, 1e-12 * std::abs(pa)) << "n = " << n << " t = " << t;
        EXPECT_NEAR(rb[t], pb, 1e-12 * (1 + std::abs(pb))) << "n = " << n << " t = " << t;
      }
    }
}

TEST(AssociativeScan, LinearRecurrencePairsMatchLinearRecurrenceWithGradients) {
  // (a1, b1) then (a2, b2) = (a1 a2, a2 b1 + b2): the prefix's b is x_t = a_t x_{t-1} + b_t. The
  // operator is associative but not commutative, so this also checks the order of the operands.
  AssociativeFn affine = [](const std::vector<Tensor>& p, const std::vector<Tensor>& q) {
    return std::vector<Tensor>{p[0] * q[0], q[0] * p[1] + q[1]};
  };
  std::vector<Tensor> args{randn(Axes{{"t", 37}, {"j", 3}}, 12) * 0.3 + 0.5, randn(Axes{{"t", 37}, {"j", 3}}, 13)};
  auto by_prefix = [&](const std::vector<Tensor>& a) {
    Tensor x = associative_scan(affine, {a[0], a[1]}, "t")[1];
    return sum(x * x * tensor({1.0, 2.0, 3.0}, "j"));
  };
  auto by_recurrence = [&](const std::vector<Tensor>& a) {
    Tensor x = linear_recurrence(a[0], a[1], "t");
    return sum(x * x * tensor({1.0, 2.0, 3.0}, "j"));
  };
  auto [v, g] = value_and_grad(by_prefix, args);
  auto [v_ref, g_ref] = value_and_grad(by_recurrence, args);
  EXPECT_NEAR(v.item(), v_ref.item(), 1e-10 * std::abs(v_ref.item()));
  for (size_t k = 0; k < 2; ++k) EXPECT_LT(mismatch(g[k], g_ref[k], 1e-10, 1e-12), 1.0) << "argument " << k;
}

TEST(AssociativeScan, ErrorsSayWhatIsWrong) {
  AssociativeFn add_fn = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    return std::vector<Tensor>{a[0] + b[0]};
  };
  EXPECT_MESSAGE(
      testing::error_message<AxisError>([&] { (void)associative_scan(add_fn, {randn(Axes{{"s", 4}}, 1)}, "t"); }),
      "has no axis 't'");
  EXPECT_MESSAGE(testing::error_message<ShapeError>([&] {
                   (void)associative_scan(add_fn, {randn(Axes{{"t", 4}}, 1), randn(Axes{{"t", 5}}, 1)}, "t");
                 }),
                 "has 5 steps along 't' but element 0 has 4");
  AssociativeFn grows = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    return std::vector<Tensor>{broadcast(a[0] + b[0], Axes{{"k", 2}})};
  };
  EXPECT_MESSAGE(
      testing::error_message<ShapeError>([&] { (void)associative_scan(grows, {randn(Axes{{"t", 4}}, 1)}, "t"); }),
      "it must keep the axes");
}

// Forward mode goes through its levels (ordinary recorded ops): the forward Jacobian of the
// linear-recurrence pairs equals the reverse one, in both directions.
TEST(AssociativeScan, ForwardModeJacobianEqualsReverseMode) {
  std::vector<Tensor> args{uniform(Axes{{"t", 8}, {"h", 2}}, 1, 0.5, 0.9), randn(Axes{{"t", 8}, {"h", 2}}, 2)};
  for (ScanDirection d : {ScanDirection::forward, ScanDirection::reverse}) {
    Function f = [d](const std::vector<Tensor>& a) {
      AssociativeFn pair = [](const std::vector<Tensor>& l, const std::vector<Tensor>& r) {
        return std::vector<Tensor>{l[0] * r[0], r[0] * l[1] + r[1]};
      };
      return associative_scan(pair, {a[0], a[1]}, "t", d)[1];
    };
    std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward}), back = jacobian(f, args);
    for (size_t k = 0; k < 2; ++k) EXPECT_LT(mismatch(fwd[k], back[k], 1e-13, 1e-15), 1.0) << "argument " << k;
  }
}

}  // namespace
}  // namespace tenax
