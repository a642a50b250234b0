// nmap: vectorised, equal to the per-slice loop, nestable, differentiable, and constants stay single.
#include <cmath>

#include "expect_message.h"
#include "op_check.h"

namespace tenax {
namespace {

using testing::mismatch;

// A small model per slice: a Gaussian log-density of x under a per-slice covariance.
Tensor logpdf(const std::vector<Tensor>& p) {
  Tensor l = cholesky(p[0], "i", "j");
  Tensor z = triangular_solve(l, p[1], "i", "j");
  return -0.5 * sum(square(z)) - 0.5 * logdet(p[0], "i", "j") - 2.0 * std::log(2 * M_PI) + 0.0 * sum(p[2]);
}

struct Batch {
  Tensor cov, x, shared;
};

Batch make_batch(int64_t n) {
  std::vector<Tensor> covs, xs;
  for (int64_t b = 0; b < n; ++b) {
    Tensor g = randn(Axes{{"i", 4}, {"k", 4}}, 100 + uint64_t(b));
    covs.push_back(dot(g, rename(g, "i", "j"), {"k"}) + 4.0 * tensor({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}, "i", "j"));
    xs.push_back(randn(Axes{{"i", 4}}, 200 + uint64_t(b)));
  }
  return {stack(covs, "series"), stack(xs, "series"), tensor({1.0, 2.0}, "e")};
}

TEST(Nmap, EqualsThePerSliceLoop) {
  Batch b = make_batch(5);
  Tensor out = nmap(logpdf, {"series"}, {b.cov, b.x, b.shared});
  EXPECT_EQ(out.axes().describe(), "(series=5)");
  for (int64_t k = 0; k < 5; ++k) {
    double one = logpdf({select(b.cov, "series", k), select(b.x, "series", k), b.shared}).item();
    EXPECT_NEAR(out.at({{"series", k}}), one, 1e-12);
  }
}

TEST(Nmap, GradientEqualsTheSumOfPerSliceGradients) {
  Batch b = make_batch(4);
  auto total = [](const std::vector<Tensor>& p) { return sum(nmap(logpdf, {"series"}, p)); };
  auto g = grad(total, {b.cov, b.x, b.shared});
  for (int64_t k = 0; k < 4; ++k) {
    auto gk = grad(logpdf, {select(b.cov, "series", k), select(b.x, "series", k), b.shared});
    EXPECT_LE(mismatch(select(g[0], "series", k), gk[0], 1e-10, 1e-12), 1.0);
    EXPECT_LE(mismatch(select(g[1], "series", k), gk[1], 1e-10, 1e-12), 1.0);
  }
}

TEST(Nmap, NestedMapsCompose) {
  Tensor a = randn(Axes{{"b", 3}, {"m", 2}, {"k", 5}}, 1), w = randn(Axes{{"c", 4}, {"k", 5}}, 2);
  // Outer over b, inner over c: each (b, c) pair is an inner product over k, then a softplus.
  Tensor out = nmap(
      [](const std::vector<Tensor>& p) {
        return nmap([](const std::vector<Tensor>& q) { return softplus(dot(q[0], q[1], {"k"})); }, {"c"}, p);
      },
      {"b"}, {a, w});
  EXPECT_TRUE(out.axes().same_set(Axes{{"b", 3}, {"m", 2}, {"c", 4}})) << out.describe();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t c = 0; c < 4; ++c) {
      Tensor e = softplus(dot(select(a, "b", i), select(w, "c", c), {"k"}));
      EXPECT_LE(mismatch(select(select(out, "b", i), "c", c), e, 1e-12, 1e-12), 1.0);
    }
}

TEST(Nmap, ConstantsAreNotCopiedPerSlice) {
  Tensor x = randn(Axes{{"batch", 64}, {"i", 3}}, 1);
  auto results = nmap(
      [](const std::vector<Tensor>& p) {
        return std::vector<Tensor>{p[0] * 2.0, ones(Axes{{"k", 1000}})};  // the second ignores the slice
      },
      {"batch"}, {x});
  const Tensor& constant = results[1];
  EXPECT_TRUE(constant.axes().same_set(Axes{{"k", 1000}, {"batch", 64}}));
  EXPECT_EQ(constant.stride("batch"), 0);                     // a view, not 64 copies
  EXPECT_EQ(constant.storage()->bytes(), 1000 * sizeof(double));
  EXPECT_EQ(constant.at({{"batch", 63}, {"k", 999}}), 1.0);
}

TEST(Nmap, MappedAxesAreInvisibleInside) {
  Tensor x = randn(Axes{{"batch", 3}, {"i", 4}}, 1);
  Tensor s = nmap([](const std::vector<Tensor>& p) { return sum(p[0]); }, {"batch"}, {x});
  EXPECT_LE(mismatch(s, sum(x, {"i"}), 1e-14, 1e-14), 1.0);  // "all axes" is i only
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] {
                   nmap([](const std::vector<Tensor>& p) { return sum(p[0], {"batch"}); }, {"batch"}, {x});
                 }),
                 "[sum] axis 'batch' is mapped by an enclosing nmap/map and invisible inside it");
}

// A scan inside nmap whose matrix carry starts shared (no mapped axis) and picks the mapped axis
// up from the step: the init is widened, and laid out again until step 0 returns the carry in the
// order it went in (here the order changes once more after the first widening).
TEST(Nmap, ScanCarryPickingUpTheMappedAxisEqualsThePerSliceLoop) {
  const Tensor a = tensor({{0.9, 0.1}, {-0.2, 0.8}}, "i", "k");
  const Tensor p0 = tensor({{1.0, 0.0}, {0.0, 1.0}}, "i", "j");
  auto run = [&](const std::vector<Tensor>& args) {
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      const Tensor ap = dot(a, rename(c[0], {"i", "j"}, {"k", "l"}), {"k"});  // (i, l)
      const Tensor apa = dot(ap, rename(a, {"i", "k"}, {"j", "l"}), {"l"});    // (i, j)
      const Tensor w = x[0] * rename(x[0], "i", "j");                            // (i, j), per slice
      return std::make_pair(std::vector<Tensor>{apa + 0.1 * w}, std::vector<Tensor>{});
    };
    return scan(body, {p0}, {args[0]}, "t").carry[0];
  };
  const Tensor xs = randn(Axes{{"b", 3}, {"t", 6}, {"i", 2}}, 9);
  const Tensor out = nmap([&](const std::vector<Tensor>& args) { return run(args); }, {"b"}, {xs});
  for (int64_t k = 0; k < 3; ++k) {
    const Tensor one = run({select(xs, "b", k)});
    EXPECT_LE(mismatch(select(out, "b", k), one, 1e-13, 1e-14), 1.0) << "slice " << k;
  }
}

TEST(Nmap, BadCallsAreErrors) {
  Tensor x = randn(Axes{{"batch", 3}}, 1), y = randn(Axes{{"batch", 4}}, 2);
  auto id = [](const std::vector<Tensor>& p) { return p[0]; };
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] { nmap(id, {"nope"}, {x}); }),
                 "[nmap] no argument has the mapped axis 'nope'");
  EXPECT_MESSAGE(
      testing::error_message<ShapeError>([&] {
        nmap(id, {"batch"}, {x, y});
      }),
      "[nmap] mapped axis 'batch' has size 3 in argument 0 (batch=3) but size 4 in argument 1 (batch=4)");
  EXPECT_MESSAGE(testing::error_message<AxisError>([&] {
                   nmap([&](const std::vector<Tensor>& p) { return nmap(id, {"batch"}, p); }, {"batch"}, {x});
                 }),
                 "[nmap] axis 'batch' is already mapped by an enclosing nmap/map");
}

// Transforms inside nmap: each slice differentiates its own function (per-example gradients,
// the vmap(grad) idiom), against a loop over the slices.
TEST(Nmap, GradVjpAndJvpInsideAreThePerSliceOnes) {
  const Tensor xs = randn(Axes{{"b", 5}, {"i", 3}}, 21), w = tensor({0.3, -0.7, 0.5}, "i");
  Function loss = [](const std::vector<Tensor>& a) { return sum(square(tanh(a[0] * a[1]))) * 0.5; };
  // d loss / d w per example, d loss / d x per example
  std::vector<Tensor> per = nmap(
      [&](const std::vector<Tensor>& a) { return grad(loss, {a[1], a[0]}); }, {"b"}, {xs, w});
  ASSERT_EQ(per.size(), 2u);
  // vjp with a cotangent of 2 (shared by every slice) and jvp along (dw, 0)
  const Tensor dw = tensor({1.0, 0.5, -2.0}, "i");
  std::vector<Tensor> via_vjp = nmap(
      [&](const std::vector<Tensor>& a) {
        VjpResult r = vjp(loss, {a[1], a[0]});
        return r.pullback(scalar(2.0));
      },
      {"b"}, {xs, w});
  Tensor via_jvp = nmap([&](const std::vector<Tensor>& a) { return jvp(loss, {a[1], a[0]}, {dw, Tensor()}).second; },
                        {"b"}, {xs, w});
  for (int64_t b = 0; b < 5; ++b) {
    const Tensor x = select(xs, "b", b);
    std::vector<Tensor> g = grad(loss, {w, x});
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_LT(mismatch(select(per[k], "b", b), g[k], 1e-14, 1e-15), 1.0) << "slice " << b << " argument " << k;
      EXPECT_LT(mismatch(select(via_vjp[k], "b", b), g[k] * 2.0, 1e-14, 1e-15), 1.0) << "slice " << b;
    }
    EXPECT_NEAR(select(via_jvp, "b", b).item(), sum(g[0] * dw).item(), 1e-14) << "slice " << b;
  }
  EXPECT_TRUE(per[0].axes().same_set(Axes{{"b", 5}, {"i", 3}})) << per[0].axes().describe();
}

// Per-example Jacobians (vmap(jacrev) / vmap(jacfwd)): jacobian inside nmap, both modes, against
// the per-slice loop; a shared argument's Jacobian is per slice too.
TEST(Nmap, JacobianInsideIsThePerSliceOne) {
  const Tensor xs = randn(Axes{{"b", 4}, {"i", 3}}, 23), w = tensor({0.3, -0.7, 0.5}, "i");
  Function f = [](const std::vector<Tensor>& a) { return tanh(a[0] * a[1]) * sum(a[1]); };
  for (auto mode : {JacobianOptions::Mode::reverse, JacobianOptions::Mode::forward}) {
    std::vector<Tensor> per = nmap([&](const std::vector<Tensor>& a) { return jacobian(f, {a[1], a[0]}, {mode}); },
                                   {"b"}, {xs, w});
    ASSERT_EQ(per.size(), 2u);
    for (int64_t b = 0; b < 4; ++b) {
      std::vector<Tensor> j = jacobian(f, {w, select(xs, "b", b)}, {mode});
      for (size_t k = 0; k < 2; ++k) {
        EXPECT_TRUE(per[k].axes().same_set(Axes{{"b", 4}, {"i", 3}, {"i_in", 3}})) << per[k].axes().describe();
        EXPECT_LT(mismatch(select(per[k], "b", b), j[k], 1e-14, 1e-15), 1.0) << "slice " << b << " argument " << k;
      }
    }
  }
}

}  // namespace
}  // namespace tenax
