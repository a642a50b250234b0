// scan over an axis that is not the outer one of its inputs: the values and gradients equal those
// of the same scan over the dense layout bit for bit, whether the scan runs in blocks of the batch
// axis (a step local along it; under a tape too) or as one scan through staged slices (a step that
// mixes the batch axis).
#include <utility>
#include <vector>

#include "op_check.h"
#include "thomas_scan.h"

namespace tenax {
namespace {

// Large enough that a step's slice spans more lines than stay cached (staged) and the batch axis
// holds two blocks at least (scan_blocked.h, slice_copy.h).
constexpr int64_t kSys = 20000, kRows = 24;

Tensor rows_inner(uint64_t seed, double lo, double hi) {
  return uniform(Axes{{"sys", kSys}, {"i", kRows}}, seed, lo, hi);
}
Tensor dense(const Tensor& t) { return contiguous(transpose(t, {"i", "sys"})); }

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.axes().describe(), b.axes().describe());
  EXPECT_EQ(contiguous(a).to_vector(), contiguous(b).to_vector());
}

TEST(ScanLayout, ThomasOverTheInnerAxisEqualsTheDenseLayout) {
  Tensor lower = rows_inner(1, -1, 1), diag = rows_inner(2, 2.5, 3.5), upper = rows_inner(3, -1, 1),
         rhs = rows_inner(4, -1, 1);
  Tensor strided = testing::thomas_by_scan(lower, diag, upper, rhs, "i");
  Tensor plain = testing::thomas_by_scan(dense(lower), dense(diag), dense(upper), dense(rhs), "i");
  expect_same(strided, plain);
  // and the solution solves the systems: diag x_i + lower x_{i-1} + upper x_{i+1} = rhs
  std::vector<double> xv = contiguous(transpose(strided, {"sys", "i"})).to_vector();
  std::vector<double> a = lower.to_vector(), b = diag.to_vector(), c = upper.to_vector(), d = rhs.to_vector();
  for (int64_t s = 0; s < kSys; s += 997)
    for (int64_t i = 0; i < kRows; ++i) {
      const auto k = static_cast<size_t>(s * kRows + i);
      double lhs = b[k] * xv[k];
      if (i > 0) lhs += a[k] * xv[k - 1];
      if (i + 1 < kRows) lhs += c[k] * xv[k + 1];
      EXPECT_NEAR(lhs, d[k], 1e-12) << "system " << s << " row " << i;
    }
}

// A reverse scan, a carry with an extra axis, an output that is x_t itself and an x without the
// batch axis.
TEST(ScanLayout, AReverseScanWithSeveralCarriesEqualsTheDenseLayout) {
  Tensor u = rows_inner(5, -1, 1), gain = uniform(Axes{{"i", kRows}}, 6, 0.5, 1.5);
  Tensor h0 = zeros(Axes{{"sys", kSys}}), pair0 = zeros(Axes{{"k", 2}, {"sys", kSys}});
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor h = tanh(c[0] * scalar(0.9) + x[0] * x[1]);
    Tensor pair = c[1] * scalar(0.5) + h;
    return std::make_pair(std::vector<Tensor>{h, pair}, std::vector<Tensor>{h, x[0]});
  };
  ScanOptions rev;
  rev.reverse = true;
  ScanResult a = scan(body, {h0, pair0}, {u, gain}, "i", rev);
  ScanResult b = scan(body, {h0, pair0}, {dense(u), gain}, "i", rev);
  for (size_t k = 0; k < 2; ++k) expect_same(a.carry[k], b.carry[k]);
  for (size_t k = 0; k < 2; ++k) expect_same(a.ys[k], b.ys[k]);
}

// Steps that are not local along the batch axis run as one scan: a mean over it, a closed-over
// tensor that has it.
TEST(ScanLayout, StepsMixingTheBatchAxisRunWhole) {
  Tensor u = rows_inner(7, -1, 1), w = uniform(Axes{{"sys", kSys}}, 8, 0.1, 0.9);
  for (int variant = 0; variant < 2; ++variant) {
    ScanBody body = [variant, w](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor h = variant == 0 ? c[0] * scalar(0.5) + x[0] - mean(c[0], {"sys"}) : c[0] * w + x[0];
      return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{h});
    };
    ScanResult a = scan(body, {zeros(Axes{{"sys", kSys}})}, {u}, "i");
    ScanResult b = scan(body, {zeros(Axes{{"sys", kSys}})}, {dense(u)}, "i");
    expect_same(a.carry[0], b.carry[0]);
    expect_same(a.ys[0], b.ys[0]);
  }
}

// Under a tape the blocks' runs are one node whose reverse pass runs block by block.
TEST(ScanLayout, GradientsThroughBlocksEqualTheDenseLayout) {
  Tensor lower = rows_inner(11, -1, 1), diag = rows_inner(12, 2.5, 3.5), upper = rows_inner(13, -1, 1),
         rhs = rows_inner(14, -1, 1);
  Tensor weight = uniform(Axes{{"i", kRows}, {"sys", kSys}}, 15, -1, 1);
  auto grads = [&](const std::vector<Tensor>& in) {
    Tape tape;
    std::vector<Tensor> w;
    for (const Tensor& t : in) w.push_back(tape.watch(t));
    Tensor x = testing::thomas_by_scan(w[0], w[1], w[2], w[3], "i");
    return tape.gradient(sum(x * weight), w);
  };
  std::vector<Tensor> a = grads({lower, diag, upper, rhs});
  std::vector<Tensor> b = grads({dense(lower), dense(diag), dense(upper), dense(rhs)});
  for (size_t k = 0; k < 4; ++k) expect_same(transpose(a[k], {"i", "sys"}), transpose(b[k], {"i", "sys"}));
  // and against finite differences in one entry of each
  for (size_t k = 0; k < 4; ++k) {
    std::vector<Tensor> in = {lower, diag, upper, rhs};
    std::vector<double> v = in[k].to_vector();
    const size_t at = 37 * kRows + 5;
    const double h = 1e-6;
    auto loss = [&](double delta) {
      std::vector<double> p = v;
      p[at] += delta;
      std::vector<Tensor> q = in;
      q[k] = tensor(p, in[k].axes());
      return sum(testing::thomas_by_scan(q[0], q[1], q[2], q[3], "i") * weight).item();
    };
    const double fd = (loss(h) - loss(-h)) / (2 * h);
    EXPECT_NEAR(a[k].to_vector()[at], fd, 1e-6 * (1 + std::abs(fd))) << "input " << k;
  }
}

// Forward mode through blocks: each block's tangents from its block of the inputs' tangents.
TEST(ScanLayout, ForwardModeThroughBlocksEqualsTheDenseLayout) {
  std::vector<Tensor> in{rows_inner(41, -1, 1), rows_inner(42, 2.5, 3.5), rows_inner(43, -1, 1), rows_inner(44, -1, 1)};
  std::vector<Tensor> dir{rows_inner(45, -1, 1), rows_inner(46, -1, 1), rows_inner(47, -1, 1), rows_inner(48, -1, 1)};
  Function solve = [](const std::vector<Tensor>& a) { return testing::thomas_by_scan(a[0], a[1], a[2], a[3], "i"); };
  std::vector<Tensor> in_dense, dir_dense;
  for (size_t k = 0; k < 4; ++k) {
    in_dense.push_back(dense(in[k]));
    dir_dense.push_back(dense(dir[k]));
  }
  auto [x, dx] = jvp(solve, in, dir);
  auto [y, dy] = jvp(solve, in_dense, dir_dense);
  expect_same(x, y);
  expect_same(dx, dy);
  // and against a central difference along the direction
  const double h = 1e-6;
  std::vector<Tensor> plus, minus;
  for (size_t k = 0; k < 4; ++k) {
    plus.push_back(in[k] + dir[k] * h);
    minus.push_back(in[k] - dir[k] * h);
  }
  const Tensor fd = (solve(plus) - solve(minus)) * (0.5 / h);
  EXPECT_LT(testing::mismatch(dx, fd, 1e-5, 1e-6), 1.0);
}

// A step that mixes the batch axis runs whole under a tape: x_t loads from stages, the input's
// adjoint is held a block of steps at a time and written back.
TEST(ScanLayout, GradientsOfAStepMixingTheBatchAxisEqualTheDenseLayout) {
  Tensor u = rows_inner(21, -1, 1), h0 = uniform(Axes{{"sys", kSys}}, 22, -1, 1);
  Tensor weight = uniform(Axes{{"i", kRows}, {"sys", kSys}}, 23, -1, 1);
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor h = tanh(c[0] * scalar(0.8) + x[0] - mean(c[0], {"sys"}));
    return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{h * x[0]});
  };
  auto grads = [&](const Tensor& xs) {
    Tape tape;
    Tensor w = tape.watch(xs), c = tape.watch(h0);
    ScanResult r = scan(body, {c}, {w}, "i");
    return tape.gradient(sum(r.ys[0] * weight) + sum(r.carry[0]), {w, c});
  };
  std::vector<Tensor> a = grads(u), b = grads(dense(u));
  expect_same(transpose(a[0], {"i", "sys"}), transpose(b[0], {"i", "sys"}));
  expect_same(a[1], b[1]);
}

// Blocks under a tape with a tracked parameter the step closes over: its adjoint collects every
// block's contribution (summed in another order than the whole scan's: equal to rounding).
TEST(ScanLayout, AParameterGradientCollectsEveryBlock) {
  Tensor u = rows_inner(31, -1, 1), decay = scalar(0.7);
  auto grads = [&](const Tensor& xs) {
    Tape tape;
    Tensor a = tape.watch(decay), w = tape.watch(xs);
    ScanBody body = [a](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor h = c[0] * a + tanh(x[0]);
      return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{square(h)});
    };
    ScanResult r = scan(body, {zeros(Axes{{"sys", kSys}})}, {w}, "i");
    return tape.gradient(sum(r.ys[0]), {a, w});
  };
  std::vector<Tensor> g = grads(u), d = grads(dense(u));
  EXPECT_NEAR(g[0].item(), d[0].item(), 1e-12 * std::abs(d[0].item()));
  expect_same(transpose(g[1], {"i", "sys"}), transpose(d[1], {"i", "sys"}));
  // d/da of sum_t sum_s h_t^2 by central differences
  auto loss = [&](double a) {
    ScanBody body = [a](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor h = c[0] * scalar(a) + tanh(x[0]);
      return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{square(h)});
    };
    return sum(scan(body, {zeros(Axes{{"sys", kSys}})}, {u}, "i").ys[0]).item();
  };
  const double fd = (loss(0.7 + 1e-6) - loss(0.7 - 1e-6)) / 2e-6;
  EXPECT_NEAR(g[0].item(), fd, 1e-6 * std::abs(fd));
}

}  // namespace
}  // namespace tenax
