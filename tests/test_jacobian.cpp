// jacobian: both modes against central finite differences, the naming of colliding axes, the
// fallback for ops without batched VJPs, Jacobians through scan (both modes) and
// linear_recurrence, and forward mode's demand (which tangent slices a custom node must write).
#include <algorithm>
#include <cmath>

#include "op_check.h"
#include "tenax/autodiff/recording.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {
namespace {

using testing::mismatch;

// J[o..., i...] of f w.r.t. args[k] by central differences, laid out like `like`.
Tensor fd_jacobian(const Function& f, const std::vector<Tensor>& args, size_t k, const Tensor& like) {
  Tensor j = zeros(like.axes());
  const Tensor y = f(args);
  const int64_t n_out = y.numel(), n_in = args[k].numel();
  for (int64_t i = 0; i < n_in; ++i) {
    const double h = 1e-6;
    auto [p, m] = testing::nudged(args, k, i, h);
    const Tensor d = (contiguous(f(p)) - contiguous(f(m))) * (1.0 / (2 * h));
    // like is contiguous with output axes first: element (o, i) is at o * n_in + i.
    for (int64_t o = 0; o < n_out; ++o)
      static_cast<double*>(j.data_ptr())[o * n_in + i] = testing::get_flat(transpose(d, y.axes().names()), o);
  }
  return j;
}

TEST(Jacobian, BothModesMatchFiniteDifferencesAndNameCollidingAxes) {
  // f(x, w) = tanh(w . x) * x over h: the output axis h collides with x's and w's h.
  Function f = [](const std::vector<Tensor>& a) {
    return tanh(dot(a[1], rename(a[0], "h", "k"), {"k"})) * a[0];
  };
  std::vector<Tensor> args{randn(Axes{{"h", 3}}, 1), randn(Axes{{"h", 3}, {"k", 3}}, 2) * 0.5};
  for (auto mode : {JacobianOptions::Mode::reverse, JacobianOptions::Mode::forward}) {
    std::vector<Tensor> j = jacobian(f, args, {mode});
    EXPECT_EQ(j[0].axes().describe(), "(h=3, h_in=3)");
    EXPECT_EQ(j[1].axes().describe(), "(h=3, h_in=3, k=3)");
    for (size_t k = 0; k < 2; ++k)
      EXPECT_LT(mismatch(j[k], fd_jacobian(f, args, k, j[k]), 1e-7, 1e-8), 1.0) << "argument " << k;
  }
}

TEST(Jacobian, ThroughEveryViewOpInReverseMode) {
  // A view's adjoint is the view op applied to its parent's adjoint, which in a batched sweep has
  // the batch axes too: transpose's order does not name them (this was an AxisError).
  const Tensor x = randn(Axes{{"i", 2}, {"j", 3}}, 3);
  const std::vector<Function> views = {
      [](const std::vector<Tensor>& a) { return square(transpose(a[0], {"j", "i"})); },
      [](const std::vector<Tensor>& a) { return square(slice(a[0], "j", 1, 3)); },
      [](const std::vector<Tensor>& a) { return square(select(a[0], "i", 1)); },
      [](const std::vector<Tensor>& a) { return square(rename(a[0], "i", "k")); },
      [](const std::vector<Tensor>& a) { return square(broadcast(a[0], Axes{{"b", 2}})); },
  };
  for (size_t k = 0; k < views.size(); ++k) {
    const std::vector<Tensor> j = jacobian(views[k], {x});
    EXPECT_LT(mismatch(j[0], fd_jacobian(views[k], {x}, 0, j[0]), 1e-7, 1e-8), 1.0) << "view " << k;
  }
}

TEST(Jacobian, OpsWithoutBatchedVjpFallBackToOneSweepPerRow) {
  // cholesky's VJP loops over its own batch: reverse mode takes one sweep per output element.
  Function f = [](const std::vector<Tensor>& a) {
    Tensor spd = a[0] * rename(a[0], "i", "j") + tensor(std::vector<double>{2, 0, 0, 2}, Axes{{"i", 2}, {"j", 2}});
    return cholesky(spd, "i", "j");
  };
  std::vector<Tensor> args{randn(Axes{{"i", 2}}, 3)};
  Tensor rev = jacobian(f, args)[0];
  Tensor fwd = jacobian(f, args, {JacobianOptions::Mode::forward})[0];
  EXPECT_EQ(rev.axes().describe(), "(i=2, j=2, i_in=2)");
  EXPECT_LT(mismatch(rev, fwd, 1e-12, 1e-14), 1.0);
  EXPECT_LT(mismatch(rev, fd_jacobian(f, args, 0, rev), 1e-7, 1e-8), 1.0);
}

TEST(Jacobian, ForwardModeIsOneBatchedSweepThroughLinearAlgebraAndRecurrences) {
  // Every JVP rule takes the basis as batch axes (EveryOp.BatchedJvpEqualsOneJvpPerTangent): the
  // forward-mode Jacobian of a chain through cholesky, triangular_solve, logdet, tridiagonal_solve
  // and linear_recurrence equals reverse mode and finite differences.
  Function f = [](const std::vector<Tensor>& a) {
    const Tensor& x = a[0];  // (i=3)
    Tensor eye = tensor(std::vector<double>{3, 0, 0, 0, 3, 0, 0, 0, 3}, Axes{{"i", 3}, {"j", 3}});
    Tensor spd = x * rename(x, "i", "j") * 0.2 + eye;
    Tensor l = cholesky(spd, "i", "j");
    Tensor z = triangular_solve(l, x, "i", "j");  // (j)
    Tensor lower = x * 0.1, upper = x * -0.2 + 0.05;
    Tensor t = tridiagonal_solve(lower, exp(x) + 2.0, upper, rename(z, "j", "i"), "i");
    Tensor r = linear_recurrence(tensor({0.5, 0.7, 0.9}, "i"), rename(t, "i", "k") * a[1], "k");  // (k, i)
    return r * logdet(spd, "i", "j");
  };
  std::vector<Tensor> args{tensor({0.3, -0.4, 0.8}, "i"), randn(Axes{{"i", 3}}, 6)};
  std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward});
  std::vector<Tensor> rev = jacobian(f, args);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(fwd[k].axes().describe(), rev[k].axes().describe());
    EXPECT_LT(mismatch(fwd[k], rev[k], 1e-12, 1e-13), 1.0) << "argument " << k;
    EXPECT_LT(mismatch(fwd[k], fd_jacobian(f, args, k, fwd[k]), 1e-6, 1e-7), 1.0) << "argument " << k;
  }
}

TEST(Jacobian, ThroughScanAndLinearRecurrenceInOneBatchedSweep) {
  // Final state of x_t = lam * x_{t-1} + u_t over (t=6, h=2), w.r.t. lam (h) and u (t, h).
  std::vector<Tensor> args{tensor({0.9, -0.5}, "h"), randn(Axes{{"t", 6}, {"h", 2}}, 4)};
  Function by_scan = [](const std::vector<Tensor>& a) {
    ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      return std::make_pair(std::vector<Tensor>{a[0] * c[0] + x[0]}, std::vector<Tensor>{});
    };
    return scan(body, {zeros(Axes{{"h", 2}})}, {a[1]}, "t").carry[0];
  };
  Function by_recurrence = [](const std::vector<Tensor>& a) {
    return select(linear_recurrence(a[0], a[1], "t"), "t", 5);
  };
  std::vector<Tensor> js = jacobian(by_scan, args), jr = jacobian(by_recurrence, args);
  EXPECT_EQ(js[1].axes().describe(), "(h=2, t=6, h_in=2)");
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_LT(mismatch(js[k], jr[k], 1e-12, 1e-14), 1.0) << "argument " << k;
    EXPECT_LT(mismatch(js[k], fd_jacobian(by_scan, args, k, js[k]), 1e-7, 1e-8), 1.0) << "argument " << k;
  }
  // Closed form: d x_5[h] / d u_t[h'] = lam[h]^(5-t) when h == h', else 0.
  for (int t = 0; t < 6; ++t)
    for (int h = 0; h < 2; ++h)
      for (int hi = 0; hi < 2; ++hi) {
        const double lam = h == 0 ? 0.9 : -0.5;
        EXPECT_NEAR(js[1].at({{"h", h}, {"t", t}, {"h_in", hi}}), h == hi ? std::pow(lam, 5 - t) : 0.0, 1e-14);
      }
}

TEST(Jacobian, ErrorsSayWhatIsWrong) {
  Function f = [](const std::vector<Tensor>& a) { return a[0] * 2.0; };
  try {
    (void)jacobian(f, {});
    ADD_FAILURE() << "no error";
  } catch (const AutodiffError& e) {
    EXPECT_NE(std::string(e.what()).find("no arguments"), std::string::npos) << e.what();
  }
  try {
    (void)jacobian(f, {randn(Axes{{"h", 2}, {"h_in", 2}}, 1)});
    ADD_FAILURE() << "no error";
  } catch (const AxisError& e) {
    EXPECT_NE(std::string(e.what()).find("'h_in' is taken too"), std::string::npos) << e.what();
  }
  // Batched tangents: each must cover its primal's axes, and all must add the same batch axes.
  const Tensor x = randn(Axes{{"i", 3}}, 2), y = randn(Axes{{"i", 3}}, 3);
  Function g = [](const std::vector<Tensor>& a) { return a[0] * a[1]; };
  try {
    (void)jvp(g, {x, y}, {randn(Axes{{"i", 3}, {"b", 2}}, 4), randn(Axes{{"i", 3}, {"c", 2}}, 5)});
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[jvp] tangent 1 (i=3, c=2) has the batch axes (c=2) but an earlier "
                                         "tangent has (b=2); every tangent must add the same batch axes"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)jvp(g, {x, y}, {randn(Axes{{"b", 2}}, 4), Tensor()});
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(
        std::string(e.what()).find("[jvp] tangent 0 (b=2) must have its primal's axes (i=3) (and may add "
                                   "batch axes)"),
        std::string::npos)
        << e.what();
  }
}

// Forward mode through scan (ScanRun::jvp): a nonlinear body with two carries, outputs, a
// closed-over parameter, forwards and in reverse; the forward Jacobian equals the reverse one and
// central differences, and jvp equals a Jacobian-vector product.
TEST(Jacobian, ForwardModeThroughScanMatchesReverseMode) {
  std::vector<Tensor> args{tensor({0.9, -0.5}, "h"), randn(Axes{{"t", 5}, {"h", 2}}, 7), tensor({0.3, 0.2}, "h")};
  for (bool rev : {false, true}) {
    Function f = [rev](const std::vector<Tensor>& a) {
      ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        Tensor next = tanh(a[0] * c[0] + x[0]) + c[1] * 0.5;
        return std::make_pair(std::vector<Tensor>{next, c[0] * x[0]}, std::vector<Tensor>{next * next});
      };
      ScanOptions o;
      o.reverse = rev;
      ScanResult r = scan(body, {a[2], zeros(Axes{{"h", 2}})}, {a[1]}, "t", o);
      return r.ys[0] + select(r.ys[0], "t", 0) * r.carry[1];
    };
    std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward}), back = jacobian(f, args);
    for (size_t k = 0; k < args.size(); ++k) {
      EXPECT_LT(mismatch(fwd[k], back[k], 1e-12, 1e-14), 1.0) << "argument " << k << " reverse=" << rev;
      EXPECT_LT(mismatch(fwd[k], fd_jacobian(f, args, k, fwd[k]), 1e-6, 1e-7), 1.0) << "argument " << k;
    }
    // jvp along one direction = J v
    std::vector<Tensor> dir{tensor({0.4, -1.0}, "h"), randn(Axes{{"t", 5}, {"h", 2}}, 9), tensor({1.0, 0.5}, "h")};
    auto [value, tangent] = jvp(f, args, dir);
    Tensor expect = dot(back[0], rename(dir[0], "h", "h_in"), {"h_in"}) +
                    dot(back[1], rename(dir[1], {"t", "h"}, {"t_in", "h_in"}), {"t_in", "h_in"}) +
                    dot(back[2], rename(dir[2], "h", "h_in"), {"h_in"});
    EXPECT_LT(mismatch(tangent, expect, 1e-12, 1e-14), 1.0) << "reverse=" << rev;
    EXPECT_EQ(contiguous(value).to_vector(), contiguous(f(args)).to_vector());
  }
}

// The stacked outputs' tangent where an output has none at some steps: a carry's tangent that
// only the first step sees (the next carry ignores it), and one that arrives at the second step
// (the outputs read the carry, the inputs carry the tangent). Forwards and in reverse, against
// the reverse-mode Jacobian; the pool's memory poisoned first, so an unwritten step shows.
TEST(Jacobian, ForwardModeThroughScanWritesZeroTangentsAtStepsWithout) {
  const int64_t T = 6;
  std::vector<Tensor> args{tensor({0.7, -0.4}, "h"), randn(Axes{{"t", T}, {"h", 2}}, 13)};
  for (bool rev : {false, true}) {
    Function forgets = [rev](const std::vector<Tensor>& a) {  // d ys / d init: nonzero at the first step only
      ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        return std::make_pair(std::vector<Tensor>{x[0] * 1.0}, std::vector<Tensor>{c[0] * 2.0});
      };
      ScanOptions o;
      o.reverse = rev;
      return scan(body, {a[0]}, {a[1] * 1.0}, "t", o).ys[0];
    };
    Function arrives = [rev](const std::vector<Tensor>& a) {  // d ys / d xs: none at the first step
      ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        return std::make_pair(std::vector<Tensor>{c[0] * 0.5 + x[0]}, std::vector<Tensor>{c[0] * c[0]});
      };
      ScanOptions o;
      o.reverse = rev;
      return scan(body, {a[0] * 1.0}, {a[1]}, "t", o).ys[0];
    };
    for (const Function* f : {&forgets, &arrives}) {
      {  // NaN in the pool's free buffers of both stacks' sizes
        std::vector<Tensor> junk;
        for (int i = 0; i < 16; ++i) {
          junk.push_back(full(Axes{{"t", T}, {"h", 2}, {"h_in", 2}}, std::nan("")));
          junk.push_back(full(Axes{{"t", T}, {"h", 2}, {"t_in", T}, {"h_in", 2}}, std::nan("")));
        }
      }
      const std::vector<Tensor> fwd = jacobian(*f, args, {JacobianOptions::Mode::forward}), back = jacobian(*f, args);
      for (size_t k = 0; k < args.size(); ++k)
        EXPECT_LT(mismatch(fwd[k], back[k], 1e-13, 1e-14), 1.0)
            << (f == &forgets ? "forgets" : "arrives") << " argument " << k << " reverse=" << rev;
    }
  }
}

// The compiled forward step (ScanRun::compiled_jvp): carries swapped, one passed on unchanged,
// an integer counter, an output that is the incoming carry and a carry whose tangent arrives
// only at the second step — forwards and in reverse, against the reverse-mode Jacobian (J v for
// jvp, the whole Jacobian in forward mode) and central differences (w.r.t. the inputs the forward
// Jacobian runs op by op on a window of its basis, where a carry handed on as another once read a
// window already overwritten). The steps replay a program captured at the first: the buffers
// allocated do not grow with the steps (op by op, every step's rules allocate their results:
// TENAX_SCAN_TANGENT_PROGRAM=0 fails the last check).
TEST(Jacobian, ForwardModeThroughScanReplaysTheFirstStepsProgram) {
  auto make = [](int64_t T, bool rev) {
    return Function([T, rev](const std::vector<Tensor>& a) {
      ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        const Tensor n0 = tanh(a[0] * c[1] + x[0]) + c[3] * 0.25;
        const Tensor n2 = c[2] + scalar(int64_t{1});
        return std::make_pair(std::vector<Tensor>{n0, c[0], n2, c[3]},
                              std::vector<Tensor>{c[0], n0 * astype(n2, DType::f64)});
      };
      ScanOptions o;
      o.reverse = rev;
      const std::vector<Tensor> init{zeros(Axes{{"h", 2}}), a[2], scalar(int64_t{0}), a[3]};
      ScanResult r = scan(body, init, {slice(a[1], "t", 0, T)}, "t", o);
      return r.ys[0] + r.ys[1] * 0.01 + r.carry[1] * r.carry[3];
    });
  };
  const std::vector<Tensor> args{tensor({0.9, -0.5}, "h"), randn(Axes{{"t", 400}, {"h", 2}}, 5) * 0.5,
                                 tensor({0.3, 0.2}, "h"), tensor({-0.1, 0.4}, "h")};
  const std::vector<Tensor> short_args{args[0], slice(args[1], "t", 0, 6), args[2], args[3]};
  const std::vector<Tensor> dir{tensor({0.4, -1.0}, "h"), randn(Axes{{"t", 6}, {"h", 2}}, 9),
                                tensor({1.0, 0.5}, "h"), tensor({-0.3, 0.7}, "h")};
  for (bool rev : {false, true}) {
    const Function f = make(6, rev);
    const std::vector<Tensor> fwd = jacobian(f, short_args, {JacobianOptions::Mode::forward});
    const std::vector<Tensor> back = jacobian(f, short_args);
    Tensor expect = zeros(f(short_args).axes());
    for (size_t k = 0; k < args.size(); ++k) {
      EXPECT_LT(mismatch(fwd[k], back[k], 1e-12, 1e-14), 1.0) << "argument " << k << " reverse=" << rev;
      EXPECT_LT(mismatch(fwd[k], fd_jacobian(f, short_args, k, fwd[k]), 1e-6, 1e-7), 1.0) << "argument " << k;
      const Axes& ax = short_args[k].axes();
      AxisList in;
      for (int i = 0; i < ax.rank(); ++i) in.push_back(Name(ax.name(i).str() + "_in"));
      expect = expect + dot(back[k], rename(dir[k], ax.names(), in), in);
    }
    auto [value, tangent] = jvp(f, short_args, dir);
    EXPECT_LT(mismatch(tangent, expect, 1e-12, 1e-14), 1.0) << "reverse=" << rev;
    EXPECT_EQ(contiguous(value).to_vector(), contiguous(f(short_args)).to_vector());
    // Buffers per jvp at 100 and at 400 steps.
    int64_t buffers[2];
    for (int i = 0; i < 2; ++i) {
      const Function g = make(i == 0 ? 100 : 400, rev);
      std::vector<Tensor> d{dir[0], randn(Axes{{"t", 400}, {"h", 2}}, 3), dir[2], dir[3]};
      (void)jvp(g, args, d);  // warm: the pool holds what it needs
      const int64_t before = allocator_stats().allocations;
      (void)jvp(g, args, d);
      buffers[i] = allocator_stats().allocations - before;
    }
    EXPECT_LT(buffers[1] - buffers[0], 30)
        << "buffers per jvp: " << buffers[0] << " at 100 steps, " << buffers[1] << " at 400; reverse=" << rev;
  }
}

// Forward mode's demand (TapeImpl::tangent_demand): a multi-output node is offered the slices of
// its outputs' tangents the function reads. ProbeNode's outputs are 2x, 3x and x of x over (t, h).
class ProbeNode : public detail::CustomNode {
 public:
  std::vector<detail::CotangentRange> offered;
  bool accept_tangent_ranges(const std::vector<detail::CotangentRange>& ranges) override {
    offered = ranges;
    return true;
  }
  [[nodiscard]] const char* name() const override { return "probe"; }
  void vjp(const std::vector<Tensor>&, const std::vector<Tensor>&) override {}
  [[nodiscard]] int64_t residual_bytes() const override { return 0; }
  bool jvp(const std::vector<Tensor>& tangents, const Axes&, std::vector<Tensor>& out) override {
    out = {tangents[0] * 2.0, tangents[0] * 3.0, tangents[0] * 1.0};
    return true;
  }
};

std::vector<Tensor> probe(const Tensor& x, const std::shared_ptr<ProbeNode>& node) {
  std::vector<Tensor> out;
  {
    detail::PauseRecording pause;
    out = {x * 2.0, x * 3.0, x * 1.0};
  }
  detail::g_record_state.recorder->record_custom(node, {x}, out);
  return out;
}

// Output 0 is read through a select after a rename and one after a transpose (the hull of both
// steps), output 1 whole (a sum over t), output 2 not at all; the tangent is 2 (d_2 + d_6) + 3 Σ d.
TEST(Jacobian, ForwardModeOffersACustomNodeTheSlicesOfItsOutputsItReads) {
  const Tensor x = randn(Axes{{"t", 8}, {"h", 2}}, 31), dir = randn(Axes{{"t", 8}, {"h", 2}}, 32);
  auto node = std::make_shared<ProbeNode>();
  Function f = [&](const std::vector<Tensor>& a) {
    const std::vector<Tensor> y = probe(a[0], node);
    return select(rename(y[0], "t", "s"), "s", 2) + select(transpose(y[0], {"h", "t"}), "t", 6) + sum(y[1], {"t"});
  };
  const Tensor tangent = jvp(f, {x}, {dir}).second;
  ASSERT_EQ(node->offered.size(), 3U);
  EXPECT_EQ(node->offered[0].axis, Name("t"));
  EXPECT_EQ(node->offered[0].lo, 2);
  EXPECT_EQ(node->offered[0].hi, 7);
  EXPECT_TRUE(node->offered[1].whole());
  EXPECT_TRUE(node->offered[2].empty());
  const Tensor expect = (select(dir, "t", 2) + select(dir, "t", 6)) * 2.0 + sum(dir, {"t"}) * 3.0;
  EXPECT_LT(mismatch(tangent, expect, 1e-14, 1e-15), 1.0);
}

// A scan's stacked output read only at its final step (the S5 Jacobian's final state) and at one
// more step, forwards and in reverse: the forward Jacobian writes the tangents of those steps only
// and equals the reverse one, with the pool poisoned so that a step it should have written shows.
TEST(Jacobian, ForwardModeThroughScanWritesOnlyTheSelectedStepsOfStackedOutputs) {
  const int64_t T = 40;
  std::vector<Tensor> args{tensor({0.7, -0.4}, "h"), randn(Axes{{"t", T}, {"h", 2}}, 33)};
  for (bool rev : {false, true}) {
    Function f = [rev](const std::vector<Tensor>& a) {
      ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        Tensor next = tanh(a[0] * c[0] + x[0]);
        return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next, next * x[0]});
      };
      ScanOptions o;
      o.reverse = rev;
      const ScanResult r = scan(body, {a[0] * 0.5}, {a[1]}, "t", o);
      const Tensor ys = rename(r.ys[0], "h", "k");
      return rename(select(ys, "t", T - 1) + select(ys, "t", 3), "k", "h");  // r.ys[1] unread
    };
    {
      std::vector<Tensor> junk;
      for (int i = 0; i < 16; ++i) junk.push_back(full(Axes{{"t", T}, {"h", 2}, {"t_in", T}, {"h_in", 2}}, std::nan("")));
    }
    const std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward}), back = jacobian(f, args);
    for (size_t k = 0; k < args.size(); ++k)
      EXPECT_LT(mismatch(fwd[k], back[k], 1e-13, 1e-14), 1.0) << "argument " << k << " reverse=" << rev;
  }
}

// Forward mode through scan on a window of the batch (BatchWindow in autodiff/scan_tangent.cpp):
// the forward Jacobian w.r.t. the inputs of a scan with a carry that passes through, one that has
// no tangent, one that sums the inputs and is an output as it comes in (its tangent is the carried
// one plus the step's: summed into a copy) and one that is also an output as it leaves, forwards and in reverse, against the reverse-mode
// Jacobian: as the scan sees them (the window grows with the steps and moves), with the first
// steps' inputs masked (tangents zero until step 5), mixed along t first (every step's tangent
// dense: the window closes at the first step), and mixed at the last step only (it closes there,
// its window already whole).
TEST(Jacobian, ForwardModeThroughScanOnAWindowOfTheBasisMatchesReverseMode) {
  const int64_t T = 40;
  std::vector<double> m(T, 1.0);
  std::fill(m.begin(), m.begin() + 5, 0.0);
  const Tensor mask = tensor(m, Axes{{"t", T}});
  std::vector<double> m2(T, 0.0);
  m2[T - 1] = 0.1;
  const Tensor late = tensor(m2, Axes{{"t", T}});
  std::vector<Tensor> args{randn(Axes{{"t", T}, {"h", 2}}, 41)};
  for (int inputs = 0; inputs < 4; ++inputs)
    for (bool rev : {false, true}) {
      Function f = [&](const std::vector<Tensor>& a) {
        const Tensor x = inputs == 0   ? a[0]
                         : inputs == 1 ? a[0] * mask
                         : inputs == 2 ? a[0] + sum(a[0], {"t"}) * 0.1
                                       : a[0] + sum(a[0], {"t"}) * late;
        ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& xt) {
          Tensor next = tanh(c[0] * 0.8 + xt[0] * c[2]);
          return std::make_pair(std::vector<Tensor>{next, c[1], c[2] * 1.01, c[3] + xt[0]},
                                std::vector<Tensor>{next * xt[0], next, c[3]});
        };
        ScanOptions o;
        o.reverse = rev;
        const ScanResult r = scan(
            body, {tensor({0.1, -0.2}, "h"), tensor({1.0, 2.0}, "h"), tensor({0.5, 1.5}, "h"), zeros(Axes{{"h", 2}})},
            {x}, "t", o);
        return r.ys[0] + r.ys[1] * 0.5 + r.ys[2] + r.carry[0] + r.carry[1] + r.carry[3];
      };
      const std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward}), back = jacobian(f, args);
      EXPECT_LT(mismatch(fwd[0], back[0], 1e-13, 1e-14), 1.0) << "inputs " << inputs << " reverse=" << rev;
    }
}

// Two stacked scans (the seed's two-layer S5, real): the second's inputs are the first's stacked
// outputs, whose tangents are causal too (zero for the basis vectors of later steps), so both
// scans run on windows; the forward Jacobian w.r.t. the inputs equals the reverse one.
TEST(Jacobian, ForwardModeThroughStackedScansMatchesReverseMode) {
  const int64_t T = 24;
  const Tensor w1 = randn(Axes{{"h", 3}, {"i", 2}}, 51) * 0.5, w2 = randn(Axes{{"k", 3}, {"h", 3}}, 52) * 0.5;
  std::vector<Tensor> args{randn(Axes{{"t", T}, {"i", 2}}, 53)};
  Function f = [&](const std::vector<Tensor>& a) {
    ScanBody first = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = c[0] * 0.9 + dot(w1, x[0], {"i"});
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
    };
    ScanBody second = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = tanh(c[0] * 0.7 + dot(w2, x[0], {"h"}));
      return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
    };
    const Tensor hs = scan(first, {zeros(Axes{{"h", 3}})}, {a[0]}, "t").ys[0];
    const Tensor ks = scan(second, {zeros(Axes{{"k", 3}})}, {hs}, "t").ys[0];
    return select(ks, "t", T - 1);
  };
  const std::vector<Tensor> fwd = jacobian(f, args, {JacobianOptions::Mode::forward}), back = jacobian(f, args);
  EXPECT_LT(mismatch(fwd[0], back[0], 1e-13, 1e-14), 1.0);
}

}  // namespace
}  // namespace tenax
