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
