// scan: forward values against hand-written loops (any axis, reverse), gradients against the
// unrolled loop on the tape and against finite differences under every checkpoint schedule,
// parameter adjoints, and the errors a misused scan raises.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "op_check.h"
#include "scan_rnn.h"
#include "scan_unrolled.h"
#include "tenax/core/ops/scalar_loop.h"

namespace tenax {
namespace {

using testing::decay_body;
using testing::expect_scan_matches_unrolled;
using testing::expect_scan_matches_unrolled_every_way;
using testing::mismatch;
using testing::Rnn;
using testing::rnn_inputs;


TEST(Scan, ScalarRecurrenceMatchesTheLoop) {
  Tensor u = randn(Axes{{"t", 9}}, 1);
  ScanResult r = scan(decay_body(scalar(0.7)), {scalar(0.5)}, {u}, "t");
  std::vector<double> uv = u.to_vector();
  double x = 0.5;
  for (int t = 0; t < 9; ++t) {
    x = 0.7 * x + uv[size_t(t)];
    EXPECT_NEAR(r.ys[0].at({{"t", t}}), x * x, 1e-14);
  }
  EXPECT_NEAR(r.carry[0].item(), x, 1e-14);
  EXPECT_EQ(r.ys[0].axes().describe(), "(t=9)");
}

TEST(Scan, RunsAlongAnInnerAxisWithoutTransposeAndInReverse) {
  // xs (j=3, t=6): time is the inner axis; the carry is a vector over j.
  Tensor u = randn(Axes{{"j", 3}, {"t", 6}}, 2);
  Tensor lam = tensor({0.5, -0.4, 0.9}, "j");
  for (bool rev : {false, true}) {
    ScanOptions o;
    o.reverse = rev;
    ScanResult r = scan(decay_body(lam), {zeros(Axes{{"j", 3}})}, {u}, "t", o);
    EXPECT_EQ(r.ys[0].axes().describe(), "(t=6, j=3)");
    for (int j = 0; j < 3; ++j) {
      double x = 0;
      for (int s = 0; s < 6; ++s) {
        const int t = rev ? 5 - s : s;
        x = lam.at({{"j", j}}) * x + u.at({{"j", j}, {"t", t}});
        EXPECT_NEAR(r.ys[0].at({{"t", t}, {"j", j}}), x * x, 1e-14) << "reverse=" << rev;  // aligned with xs
      }
    }
  }
}

// loss(w, b, h0, xs) = sum of ys + sum of the final carry, by scan with the given options.
Tensor rnn_loss_scan(const std::vector<Tensor>& a, const ScanOptions& o) {
  ScanResult r = scan(Rnn{a[0], a[1]}, {a[2]}, {a[3]}, "t", o);
  return sum(r.ys[0]) + sum(r.carry[0] * r.carry[0]);
}

// The same loss unrolled op by op on the tape.
Tensor rnn_loss_unrolled(const std::vector<Tensor>& a) {
  Rnn f{a[0], a[1]};
  std::vector<Tensor> c{a[2]};
  Tensor total = scalar(0.0);
  for (int t = 0; t < a[3].size("t"); ++t) {
    auto [next, y] = f(c, {select(a[3], "t", t)});
    total = total + y[0];
    c = next;
  }
  return total + sum(c[0] * c[0]);
}

TEST(Scan, GradientMatchesTheUnrolledLoopUnderEveryCheckpointSchedule) {
  std::vector<Tensor> args = rnn_inputs();
  auto [value_ref, grad_ref] = value_and_grad(rnn_loss_unrolled, args);
  std::vector<ScanOptions> schedules(5);
  schedules[1].checkpoint_every = 3;
  schedules[2].checkpoint_every = 11;
  schedules[3].checkpoint_every = 50;
  schedules[4].memory_budget = 5 * 3 * 8;  // five carries of 3 float64: binomial schedule
  for (const ScanOptions& o : schedules) {
    auto [value, g] = value_and_grad([&](const std::vector<Tensor>& a) { return rnn_loss_scan(a, o); }, args);
    EXPECT_NEAR(value.item(), value_ref.item(), 1e-12);
    for (size_t k = 0; k < g.size(); ++k)
      EXPECT_LT(mismatch(g[k], grad_ref[k], 1e-11, 1e-12), 1.0)
          << "argument " << k << " checkpoint_every=" << o.checkpoint_every << " budget=" << o.memory_budget;
  }
}

TEST(Scan, GradientMatchesFiniteDifferences) {
  std::vector<Tensor> args = rnn_inputs();
  ScanOptions o;
  o.reverse = true;
  auto loss = [&](const std::vector<Tensor>& a) { return rnn_loss_scan(a, o); };
  std::vector<Tensor> g = grad(loss, args);
  for (size_t k = 0; k < args.size(); ++k) {
    for (int64_t i = 0; i < args[k].numel(); i += 2) {
      const double h = 1e-6;
      auto [p, m] = testing::nudged(args, k, i, h);
      const double fd = (loss(p).item() - loss(m).item()) / (2 * h);
      EXPECT_NEAR(testing::get_flat(g[k], i), fd, 1e-6 * (1 + std::abs(fd))) << "argument " << k << " element " << i;
    }
  }
}

TEST(Scan, StoresOnlyTheCarryPerStep) {
  // The scalar recurrence stores one float64 carry per step: 8 bytes, nothing per op.
  Tensor u0 = randn(Axes{{"t", 1000}}, 3);
  Tape tape;
  Tensor lam = tape.watch(scalar(0.9)), u = tape.watch(u0);
  ScanResult r = scan(decay_body(lam), {scalar(0.0)}, {u}, "t");
  EXPECT_EQ(tape.stats().residual_bytes, 1000 * 8);
  std::vector<Tensor> g = tape.gradient(sum(r.ys[0]), {lam, u});
  // Closed form check of d/du_t: sum_{s>=t} 2 x_s lam^(s-t).
  std::vector<double> uv = u0.to_vector(), xs(1000);
  double s = 0;
  for (int t = 0; t < 1000; ++t) xs[size_t(t)] = s = 0.9 * s + uv[size_t(t)];
  double adj = 0, dlam = 0;
  for (int t = 999; t >= 0; --t) {
    adj = 2 * xs[size_t(t)] + 0.9 * adj;
    EXPECT_NEAR(g[1].at({{"t", t}}), adj, 1e-9 * (1 + std::abs(adj)));
    if (t > 0) dlam += adj * xs[size_t(t - 1)];
  }
  EXPECT_NEAR(g[0].item(), dlam, 1e-9 * std::abs(dlam));
}

TEST(Scan, NmapInsideTheBodyAndConstantsAreNotCopied) {
  Tensor u = randn(Axes{{"b", 4}, {"t", 5}}, 9);
  Tensor w = tensor({1.5}, "one");
  ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = nmap([&](const std::vector<Tensor>& a) { return sum(w) * a[0] + a[1]; }, {"b"}, {c[0], x[0]});
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{});
  };
  ScanResult r = scan(body, {zeros(Axes{{"b", 4}})}, {u}, "t");
  for (int b = 0; b < 4; ++b) {
    double x = 0;
    for (int t = 0; t < 5; ++t) x = 1.5 * x + u.at({{"b", b}, {"t", t}});
    EXPECT_NEAR(r.carry[0].at({{"b", b}}), x, 1e-13);
  }
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Scan, AnAccumulatorCarryNeedsNoCheckpointsUnderEverySchedule) {
  // A loss accumulated in a carry is read by no reverse rule: its checkpoints are neither stored
  // nor loaded. Scalar steps (fused loops), vector steps, and an accumulator feeding the state
  // (then a recomputed chunk needs it) match the unrolled loop under every schedule.
  const Tensor a = scalar(0.7), w = tensor({0.5, -0.3, 0.8}, "h");
  const ScanBody scalar_step = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor y = a * c[0] + x[0];
    return std::make_pair(std::vector<Tensor>{y, c[1] + y * y}, std::vector<Tensor>{});
  };
  const ScanBody vector_step = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor h = tanh(w * c[0] + x[0]);
    return std::make_pair(std::vector<Tensor>{h, c[1] + sum(h * h)}, std::vector<Tensor>{});
  };
  // No value a reverse rule reads depends on c[1] within a step, but the next state does.
  const ScanBody feeding = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor y = tanh(w * c[0] + x[0]);
    return std::make_pair(std::vector<Tensor>{y + c[1], c[1] + sum(y * y)}, std::vector<Tensor>{});
  };
  std::vector<ScanOptions> schedules(6);
  schedules[1].residual_budget = 0;
  schedules[2].checkpoint_every = 3;
  schedules[3].checkpoint_every = 11;
  schedules[4].memory_budget = 6 * 4 * 8;
  schedules[5].reverse = true;
  const Tensor us = randn(Axes{{"t", 23}}, 71) * 0.5, xs = randn(Axes{{"t", 23}, {"h", 3}}, 72) * 0.5;
  for (const ScanOptions& o : schedules) {
    expect_scan_matches_unrolled(scalar_step, {scalar(0.1), scalar(0.0)}, us, o);
    expect_scan_matches_unrolled(vector_step, {zeros(Axes{{"h", 3}}), scalar(0.0)}, xs, o);
    expect_scan_matches_unrolled(feeding, {zeros(Axes{{"h", 3}}), scalar(0.0)}, xs, o);
  }
}

TEST(Scan, CompiledStepsHandleSwappedCarriesPassThroughAndOutputsThatAreCarries) {
  // (a, b, c) -> (b, a * x + 0.5 b, c): carries swap, one passes through unchanged, y_t = a.
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    return std::make_pair(std::vector<Tensor>{c[1], c[0] * x[0] + c[1] * 0.5, c[2]}, std::vector<Tensor>{c[0]});
  };
  std::vector<Tensor> init{randn(Axes{{"j", 2}}, 1), randn(Axes{{"j", 2}}, 2), randn(Axes{{"j", 2}}, 3)};
  Tensor xs = randn(Axes{{"t", 9}, {"j", 2}}, 4) * 0.5;
  expect_scan_matches_unrolled_every_way(body, init, xs, {1, 4});
}

// A second-order recurrence with carries (x_t, x_{t-1}) -> (a x_t + 0.5 x_{t-1} + u, x_t): the
// lag carry is the state before the state carry is written. The compiled step's carry hand-on
// once wrote the new state first and the lag copied the new value (wrong from the fourth step,
// the first replayed one); in single elements (the fused scalar loop) and in vectors.
TEST(Scan, ASecondOrderRecurrenceHandsTheStateOnAsTheLagCarry) {
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor next = c[0] * 0.8 + c[1] * 0.5 + x[0];
    return std::make_pair(std::vector<Tensor>{next, c[0]}, std::vector<Tensor>{next * next});
  };
  for (int64_t j : {1, 3}) {
    std::vector<Tensor> init{randn(Axes{{"j", j}}, 1), randn(Axes{{"j", j}}, 2)};
    Tensor xs = randn(Axes{{"t", 9}, {"j", j}}, 4) * 0.5;
    expect_scan_matches_unrolled_every_way(body, init, xs, {1, 4});
    // The stacked values against the recurrence in doubles.
    const std::vector<double> u = xs.to_vector({"t", "j"}), x0 = init[0].to_vector();
    const std::vector<double> x1 = init[1].to_vector();
    const std::vector<double> ys = scan(body, init, {xs}, "t").ys[0].to_vector({"t", "j"});
    for (int64_t i = 0; i < j; ++i) {
      double now = x0[static_cast<size_t>(i)], lag = x1[static_cast<size_t>(i)];
      for (int64_t t = 0; t < 9; ++t) {
        const double next = now * 0.8 + lag * 0.5 + u[static_cast<size_t>(t * j + i)];
        lag = now;
        now = next;
        EXPECT_DOUBLE_EQ(ys[static_cast<size_t>(t * j + i)], next * next) << "t=" << t << " j=" << i;
      }
    }
  }
}

// Three carries handed on in every order, each as it is, plus x_t or times (0.5 + x_t); outputs
// made of the new carries, the new carries themselves (read in place from their output slots) or
// some of them; forwards and in reverse, one and two steps per checkpoint, in single elements and
// in vectors (of 64: forward-mode tangents large enough to swap buffers, TangentSweep): the value,
// the gradient, the forward-mode derivative along a random direction and the forward-mode
// Jacobian against the loop written out on the tape.
TEST(Scan, CarriesHandedOnInEveryOrderMatchTheUnrolledLoop) {
  const int T = 6;
  for (int64_t J : {1, 3, 72}) {  // 72: the forward Jacobian's carry tangents swap buffers (41 KiB)
    const std::vector<Tensor> args{randn(Axes{{"j", J}}, 1), randn(Axes{{"j", J}}, 2),
                                   randn(Axes{{"j", J}}, 3), randn(Axes{{"t", T}, {"j", J}}, 4) * 0.5};
    std::vector<Tensor> dir;
    for (size_t k = 0; k < args.size(); ++k) dir.push_back(randn(args[k].axes(), 100 + k));
    int perm[3] = {0, 1, 2};
    do {
      for (int w = 0; w < 27; ++w) {
        const int wrap[3] = {w % 3, (w / 3) % 3, w / 9};
        auto step = [&](const std::vector<Tensor>& c, const Tensor& x) {
          std::vector<Tensor> n(3);
          for (int k = 0; k < 3; ++k) {
            const Tensor& v = c[static_cast<size_t>(perm[k])];
            n[static_cast<size_t>(k)] = wrap[k] == 0 ? v : wrap[k] == 1 ? v + x : v * (x + 0.5);
          }
          return n;
        };
        auto outputs = [](int mode, const std::vector<Tensor>& n) {
          if (mode == 0) return std::vector<Tensor>{n[0] * n[1] + n[2]};
          if (mode == 1) return n;
          return std::vector<Tensor>{n[1], n[0] * 1.0};
        };
        for (int mode = 0; mode < 3; ++mode)
          for (bool rev : {false, true})
            for (int64_t every : {1, 2}) {
              if (J > 3 && (mode == 0 || every == 2 || w % 3 != 1)) continue;  // the wide case: for the swaps
              Function by_scan = [&](const std::vector<Tensor>& a) {
                ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
                  std::vector<Tensor> n = step(c, x[0]);
                  return std::make_pair(n, outputs(mode, n));
                };
                ScanOptions o;
                o.checkpoint_every = every;
                o.reverse = rev;
                ScanResult r = scan(body, {a[0], a[1], a[2]}, {a[3]}, "t", o);
                Tensor total = sum(r.carry[0] * r.carry[1] * r.carry[2]);
                for (const Tensor& y : r.ys) total = total + sum(y * y);
                return total;
              };
              Function unrolled = [&](const std::vector<Tensor>& a) {
                std::vector<Tensor> c{a[0], a[1], a[2]};
                Tensor total = scalar(0.0);
                for (int i = 0; i < T; ++i) {
                  c = step(c, select(a[3], "t", rev ? T - 1 - i : i));
                  for (const Tensor& y : outputs(mode, c)) total = total + sum(y * y);
                }
                return total + sum(c[0] * c[1] * c[2]);
              };
              const std::string what = "perm " + std::to_string(perm[0]) + std::to_string(perm[1]) +
                                       std::to_string(perm[2]) + " wrap " + std::to_string(w) + " outputs " +
                                       std::to_string(mode) + " reverse " + std::to_string(rev) + " every " +
                                       std::to_string(every) + " J " + std::to_string(J);
              const std::vector<Tensor> g = grad(by_scan, args), expect = grad(unrolled, args);
              double along = 0;
              for (size_t k = 0; k < args.size(); ++k) {
                EXPECT_LT(mismatch(g[k], expect[k], 1e-12, 1e-14), 1.0) << what << " argument " << k;
                along += sum(expect[k] * dir[k]).item();
              }
              auto [value, tangent] = jvp(by_scan, args, dir);
              EXPECT_NEAR(value.item(), unrolled(args).item(), 1e-12 * (1 + std::abs(value.item()))) << what;
              EXPECT_NEAR(tangent.item(), along, 1e-11 * (1 + std::abs(along))) << what;
              // One sweep per argument: the others' tangents absent (a rule may then hand its
              // input's tangent on as its own).
              const std::vector<Tensor> fwd = jacobian(by_scan, args, {JacobianOptions::Mode::forward});
              for (size_t k = 0; k < args.size(); ++k)
                EXPECT_LT(mismatch(fwd[k], expect[k], 1e-12, 1e-14), 1.0) << what << " forward, arg " << k;
            }
      }
    } while (std::next_permutation(perm, perm + 3));
  }
}

// A carry handed on as its own transpose (a view of its buffer in another order): copied out
// before its buffer is written, in the step's hand-on and in forward mode's, against the unrolled
// loop (value, gradient) and the gradient along a direction (jvp).
TEST(Scan, ACarryHandedOnTransposedIsCopiedOutFirst) {
  const Tensor a = randn(Axes{{"i", 3}, {"j", 3}}, 1) * 0.5;
  const Tensor xs = randn(Axes{{"t", 6}, {"i", 3}, {"j", 3}}, 2) * 0.3;
  ScanBody body = [&a](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor n = tanh(c[0] * a + x[0]);
    const Tensor flipped = transpose(rename(c[1], {"i", "j"}, {"j", "i"}), {"i", "j"});
    return std::make_pair(std::vector<Tensor>{n, flipped}, std::vector<Tensor>{n * c[1]});
  };
  const std::vector<Tensor> init{zeros(a.axes()), randn(a.axes(), 3)};
  expect_scan_matches_unrolled_every_way(body, init, xs, {1, 2});
  Function f = [&](const std::vector<Tensor>& p) {
    ScanResult r = scan(body, {p[0], p[1]}, {xs}, "t");
    return sum(r.ys[0]) + sum(r.carry[1] * r.carry[0]);
  };
  const std::vector<Tensor> dir{randn(a.axes(), 4), randn(a.axes(), 5)};
  const std::vector<Tensor> g = grad(f, init);
  const double along = sum(g[0] * dir[0]).item() + sum(g[1] * dir[1]).item();
  EXPECT_NEAR(jvp(f, init, dir).second.item(), along, 1e-12 * (1 + std::abs(along)));
}

TEST(Scan, AStateReturnedEveryStepIsStoredOnceForOutputAndCheckpoint) {
  // A simulation that returns its new state each step (y_t = carry_{t+1}, as examples/diffusion
  // does): the stacked output and the carry's checkpoints share one buffer (autodiff/scan.cpp,
  // shared_checkpoints). Gradients against the unrolled loop under schedules whose checkpoints
  // do and do not divide the steps, forwards and in reverse (a buffer of its own there), with a
  // second carry that is not an output and a second output that is not a carry; vector carries
  // (compiled steps) and scalar ones (fused loops).
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = tanh(c[0] * 0.8 + c[1] * x[0]);
    Tensor other = c[1] * 0.9 + sum(next) * 0.1;
    return std::make_pair(std::vector<Tensor>{next, other}, std::vector<Tensor>{sum(next * next), next});
  };
  for (int64_t width : {int64_t{5}, int64_t{0}}) {
    const Axes j = width ? Axes{{"j", width}} : Axes{};
    const Axes tj = width ? Axes{{"t", 10}, {"j", width}} : Axes{{"t", 10}};
    std::vector<Tensor> init{randn(j, 21) * 0.5, randn(j, 22) * 0.5};
    Tensor xs = randn(tj, 23) * 0.5;
    for (int64_t k : {1, 3, 7})
      for (bool rev : {false, true}) {
        ScanOptions o;
        o.checkpoint_every = k;
        o.reverse = rev;
        SCOPED_TRACE("width=" + std::to_string(width));
        expect_scan_matches_unrolled(body, init, xs, o);
      }
  }
  // The forward pass on a tape allocates the stacked state and its checkpoints once: 200 steps of
  // a 128 KB state take 26 MB for both, and the other carry's checkpoints 26 MB: 52 MB and the
  // step's own buffers, not 79 MB (no intermediates kept: residual_budget 0; blocks this large
  // are rounded to 2 MiB, not to a power of two).
  const int64_t steps = 200, n = 16384;
  std::vector<Tensor> init{randn(Axes{{"j", n}}, 24) * 0.5, randn(Axes{{"j", n}}, 25) * 0.5};
  Tensor xs = randn(Axes{{"t", steps}, {"j", n}}, 26) * 0.5;
  Tape tape;
  std::vector<Tensor> a{tape.watch(init[0]), tape.watch(init[1]), tape.watch(xs)};
  const int64_t before = allocator_stats().bytes_in_use;
  ScanOptions none_kept;
  none_kept.residual_budget = 0;
  ScanResult r = scan(body, {a[0], a[1]}, {a[2]}, "t", none_kept);
  const int64_t state_bytes = n * 8 * steps;
  EXPECT_LT(allocator_stats().bytes_in_use - before, state_bytes * 5 / 2);
  EXPECT_EQ(r.ys[1].axes().describe(), "(t=200, j=16384)");
  // The output holds the states after each step (the checkpoint buffer's slot 0, init, is not in it).
  Tensor c0 = init[0], c1 = init[1];
  for (int64_t s = 0; s < 3; ++s) {
    auto [next, y] = body({c0, c1}, {select(xs, "t", s)});
    EXPECT_EQ(select(r.ys[1], "t", s).to_vector(), next[0].to_vector()) << "step " << s;
    c0 = next[0];
    c1 = next[1];
  }
}

// Every reverse schedule, both directions: every carry and intermediate kept (restored, not
// recomputed), none kept, every 3rd carry, bisection (room for 5 carries of `carry_bytes` in all).
std::vector<std::pair<std::string, ScanOptions>> every_schedule(int64_t carry_bytes) {
  std::vector<std::pair<std::string, ScanOptions>> out;
  for (bool rev : {false, true}) {
    ScanOptions kept, none, every3, bisect;
    none.residual_budget = 0;
    every3.checkpoint_every = 3;
    bisect.memory_budget = 5 * carry_bytes;
    for (auto [name, o] :
         {std::pair{"kept", kept}, {"none kept", none}, {"every 3", every3}, {"bisection", bisect}}) {
      o.reverse = rev;
      out.emplace_back(std::string(name) + (rev ? " reverse" : ""), o);
    }
  }
  return out;
}

TEST(Scan, LargeInputsAreReadInPlaceUnderEverySchedule) {
  // A step whose loop calls read x_t (more than kFlatLimit elements, so no fused scalar loop)
  // reads it from the scanned tensor instead of a copy per step (StepProgram::read_x_in_place),
  // its reverse step too (here the product's rule reads x_t). Gradients against the unrolled
  // loop under every schedule, both directions: every carry and intermediate kept (restored, not
  // recomputed: the kept bytes leave x_t out), none kept, every 3rd carry, bisection. The same
  // with x_t laid out otherwise (time innermost: copied as before), and with x_t also an output
  // (read outside the step's programs: copied as before).
  const int64_t n = 5000, steps = 9;
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = tanh(c[0] * x[0] + c[1] * 0.3);
    Tensor other = c[1] * 0.9 + x[0] * 0.2;
    return std::make_pair(std::vector<Tensor>{next, other}, std::vector<Tensor>{sum(next * x[0])});
  };
  ScanBody returns_x = [&body](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    auto [next, y] = body(c, x);
    y.push_back(x[0] * 1.0);
    y.push_back(x[0]);
    return std::make_pair(next, y);
  };
  const std::vector<Tensor> init{randn(Axes{{"j", n}}, 31) * 0.5, randn(Axes{{"j", n}}, 32) * 0.5};
  const Tensor outer = randn(Axes{{"t", steps}, {"j", n}}, 33) * 0.5;
  const Tensor inner = transpose(randn(Axes{{"j", n}, {"t", steps}}, 34) * 0.5, {"t", "j"});
  for (const auto& [name, o] : every_schedule(2 * n * 8))  // two carries of n float64
    for (const auto& [what, b, xs] : {std::tuple{"in place", &body, outer},
                                      {"time innermost", &body, inner},
                                      {"an output", &returns_x, outer}}) {
      SCOPED_TRACE(name + ", " + what);
      expect_scan_matches_unrolled(*b, init, xs, o);
    }
}

TEST(Scan, ACarryReturnedEveryStepIsReadInPlaceFromItsOutput) {
  // A carry whose new value is also an output (shared checkpoints) is read from the output's
  // buffer, slot s at step s (StepProgram::read_carries_from): no next-carry copy, no checkpoint
  // load. Read by loop calls (5000 elements) or by a tridiagonal solve only (also at 12 elements,
  // the rest flat calls), with a second carry read from its own buffer. Gradients and the final
  // carries against the unrolled loop under every schedule: kept (restored), none kept, every
  // 3rd, bisection (no shared buffer: the carry buffer as before), and in reverse (likewise).
  for (const int64_t n : {int64_t{5000}, int64_t{12}}) {
    const Tensor lower = full(Axes{{"i", n}}, -0.3), diag = full(Axes{{"i", n}}, 1.7),
                 upper = full(Axes{{"i", n}}, -0.4);
    ScanBody loops = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next =
          tanh(c[0] * 0.7 + x[0] * 0.3) + c[1] * 0.1 + square(c[0]) * 0.05;  // square's rule reads c[0]
      Tensor other = c[1] * 0.9 + next * 0.05;
      return std::make_pair(std::vector<Tensor>{next, other}, std::vector<Tensor>{sum(next * next), next});
    };
    ScanBody returns_carry = [&loops](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      auto [next, y] = loops(c, x);
      y.push_back(c[0]);  // read by the output's store: the carry buffer, as before
      return std::make_pair(next, y);
    };
    ScanBody solve = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor next = tridiagonal_solve(lower, diag, upper, c[0], "i");
      Tensor other = c[1] * 0.9 + x[0] * 0.1;
      return std::make_pair(std::vector<Tensor>{next, other},
                            std::vector<Tensor>{next, sum(square(next - x[0])) + sum(other * next)});
    };
    const Axes i{{"i", n}};
    const std::vector<Tensor> init{randn(i, 51), randn(i, 52) * 0.5};
    const Tensor xs = randn(Axes{{"t", 9}, {"i", n}}, 53) * 0.5;
    for (const auto& [name, o] : every_schedule(2 * n * 8))  // two carries of n float64
      for (const auto& [what, body] : {std::pair{"loop calls", &loops},
                                       {"a solve", &solve},
                                       {"also returning the carry", &returns_carry}}) {
        SCOPED_TRACE(name + ", " + what + ", n = " + std::to_string(n));
        expect_scan_matches_unrolled(*body, init, xs, o);
      }
  }
}

TEST(Scan, IntermediatesHandedOnAsCarriesTakeTheirCotangentsInPlace) {
  // The adjoint of an intermediate handed on as a carry is that carry's cotangent buffer itself
  // (StepProgram::backward): one intermediate handed on twice and also an output, used again in
  // the step; and two intermediates handed on crosswise, so that the step's last copies write
  // each cotangent buffer while the other still matters.
  ScanBody twice = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor m = c[0] * x[0] + c[1] * 0.5;
    return std::make_pair(std::vector<Tensor>{m, m}, std::vector<Tensor>{m, m * m});
  };
  ScanBody crosswise = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor p = c[1] * x[0];
    Tensor q = c[0] * 0.7 + p * 0.2;
    return std::make_pair(std::vector<Tensor>{p, q}, std::vector<Tensor>{q * p});
  };
  std::vector<Tensor> init{randn(Axes{{"j", 3}}, 5), randn(Axes{{"j", 3}}, 6)};
  Tensor xs = randn(Axes{{"t", 8}, {"j", 3}}, 7) * 0.5;
  for (const ScanBody* body : {&twice, &crosswise}) expect_scan_matches_unrolled_every_way(*body, init, xs, {1, 3});
}

TEST(Scan, CompiledStepsReplayReductionsLinearAlgebraAndTemporaries) {
  // max, logsumexp and mean allocate temporaries and zero-fill outputs: the replay must redo both.
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor s = c[0] + x[0];
    Tensor m = rename(s, "j", "k");
    Tensor eye = tensor(std::vector<double>{2, 0, 0, 0, 2, 0, 0, 0, 2}, Axes{{"j", 3}, {"k", 3}});
    Tensor chol = cholesky(s * m * 0.1 + eye, "j", "k");
    Tensor next = tanh(s - max(s, {"j"}) + logsumexp(s, {"j"}) * 0.1) + sum(chol, {"k"}) * 0.01;
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{mean(next, {"j"})});
  };
  expect_scan_matches_unrolled(body, {randn(Axes{{"j", 3}}, 5)}, randn(Axes{{"t", 7}, {"j", 3}}, 6), ScanOptions{});
}

Tensor identity(int64_t n, const char* row, const char* col) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * n + i)] = 1.0;
  return tensor(v, Axes{{row, n}, {col, n}});
}

TEST(Scan, CompiledStepsReplayCholeskyAndTriangularSolvesOfEverySize) {
  // Sizes 1 to 4 replay resolved per size (MatPlan), 5 through the batched kernels; lower and
  // upper, transposed, one or three right-hand sides; value and gradient (the Cholesky and
  // triangular-solve reverse rules) against the unrolled loop.
  for (int64_t n = 1; n <= 5; ++n)
    for (bool lower : {true, false})
      for (int64_t nrhs : {1, 3}) {
        ScanBody body = [n, lower](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
          Tensor s = c[0] + x[0];  // (j)
          Tensor a = s * rename(s, "j", "k") * 0.05 + identity(n, "j", "k") * 2.0;
          Tensor l = cholesky(a, "j", "k");
          Tensor t = lower ? l : rename(l, {"j", "k"}, {"k", "j"});
          Tensor rhs = c[1];                                         // (j, m)
          const Triangle tri = lower ? Triangle::lower : Triangle::upper;
          Tensor z = triangular_solve(t, rhs, "j", "k", tri);                  // (k, m)
          Tensor w = triangular_solve(t, z, "j", "k", tri, Transpose::yes);  // (j, m)
          Tensor next = tanh(w * 0.5 + rhs * 0.5);
          return std::make_pair(std::vector<Tensor>{s * 0.9, next}, std::vector<Tensor>{sum(z)});
        };
        SCOPED_TRACE("n=" + std::to_string(n) + " lower=" + std::to_string(lower) +
                     " nrhs=" + std::to_string(nrhs));
        expect_scan_matches_unrolled(body, {randn(Axes{{"j", n}}, 5), randn(Axes{{"j", n}, {"m", nrhs}}, 7)},
                                     randn(Axes{{"t", 6}, {"j", n}}, 6) * 0.3, ScanOptions{});
      }
}

TEST(Scan, CompiledStepsReplayFloat32CholeskyAndSolves) {
  // The resolved float32 kernels: a float32 scan equals the float64 one to float32 precision.
  auto run = [](DType dt) {
    ScanBody body = [dt](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor a = c[0] * rename(c[0], "j", "k") * 0.1 + astype(identity(3, "j", "k"), dt) * 2.0;
      Tensor l = cholesky(a, "j", "k");
      Tensor z = triangular_solve(l, x[0], "j", "k");
      return std::make_pair(std::vector<Tensor>{tanh(rename(z, "k", "j") + c[0] * 0.5)},
                            std::vector<Tensor>{});
    };
    Tensor init = astype(randn(Axes{{"j", 3}}, 1), dt);
    Tensor xs = astype(randn(Axes{{"t", 9}, {"j", 3}}, 2), dt);
    return astype(scan(body, {init}, {xs}, "t").carry[0], DType::f64).to_vector();
  };
  const std::vector<double> f64 = run(DType::f64), f32 = run(DType::f32);
  ASSERT_EQ(f64.size(), f32.size());
  for (size_t i = 0; i < f64.size(); ++i) EXPECT_NEAR(f32[i], f64[i], 1e-5) << i;
}

TEST(Scan, RulesWriteThroughViewsOnlyWhereTheyCoverTheirParent) {
  // The reverse step lets the first rule that writes a carry's adjoint through a view write it
  // whole (no zero fill) when the view covers the carry one to one. P: a renamed and transposed
  // view and a renamed one feed a product whose rule writes P's adjoint first through the one,
  // then adds through the other, then tanh(P)'s rule (earlier in the body) adds directly. Q: the
  // first writer is a slice (rows 0 and 2 of 3), which must not write Q whole. v: a size-1
  // broadcast, which covers it.
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor &p = c[0], &v = c[1], &q = c[2];  // (i=3, j=3), (j=3), (i=3, j=3)
    Tensor direct = tanh(p) * 0.2;
    Tensor next_q = tanh(q) * 0.5;
    Tensor pt = transpose(rename(rename(rename(p, "i", "tmp"), "j", "i"), "tmp", "j"), {"j", "i"});
    Tensor next_p = rename(dot(pt, rename(p, "i", "k"), {"j"}) * 0.1, "k", "j") + direct + x[0];
    Tensor half = slice(q, "i", 0, 3, 2);
    Tensor next_v = sum(half * 0.3, {"i"}) + sum(broadcast(v, Axes{{"u", 1}}) * 0.5, {"u"});
    return std::make_pair(std::vector<Tensor>{next_p, next_v, next_q},
                          std::vector<Tensor>{sum(next_v, {"j"})});
  };
  std::vector<Tensor> init{randn(Axes{{"i", 3}, {"j", 3}}, 11) * 0.4, randn(Axes{{"j", 3}}, 12) * 0.4,
                           randn(Axes{{"i", 3}, {"j", 3}}, 14) * 0.4};
  Tensor xs = randn(Axes{{"t", 9}, {"i", 3}, {"j", 3}}, 13) * 0.3;
  for (bool rev : {false, true}) {
    ScanOptions o;
    o.reverse = rev;
    expect_scan_matches_unrolled(body, init, xs, o);
  }
}

TEST(Scan, CompiledStepsReplayTransposedBroadcastAndReducedOperands) {
  // Small calls replay through flat kernels over up to two loop dims: a transposed operand (P^T
  // aligned by name), a row and a column broadcast, and a reduction into a broadcast adjoint.
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    const Tensor& p = c[0];
    Tensor pt = rename(rename(rename(p, "i", "tmp"), "j", "i"), "tmp", "j");
    Tensor next = tanh((p + pt) * 0.3 + x[0] * c[1]);
    Tensor col = sum(next * next, {"i"}) * 0.1;  // axes (j)
    return std::make_pair(std::vector<Tensor>{next, c[1] + col}, std::vector<Tensor>{sum(next, {"j"})});
  };
  std::vector<Tensor> init{randn(Axes{{"i", 3}, {"j", 3}}, 7) * 0.5, randn(Axes{{"j", 3}}, 8) * 0.5};
  Tensor xs = randn(Axes{{"i", 3}, {"t", 8}}, 9) * 0.5;
  for (int64_t k : {1, 3}) {
    ScanOptions o;
    o.checkpoint_every = k;
    expect_scan_matches_unrolled(body, init, xs, o);
  }
}

// Scalar carries: every call of the step is on one element, so the steps run as fused scalar
// loops (core/ops/scalar_loop.h) with copies renamed away, under every schedule: a checkpoint per
// step, every 3 or 4 steps (T = 9: chunks of 3, and a last chunk of one step), and recursive
// bisection (a 120-byte budget). Against the unrolled loop, forwards and in reverse.
TEST(Scan, FusedScalarStepsMatchTheUnrolledLoop) {
  // Swapped and passed-through carries, y_t = a carry (the copies the fused loop renames).
  ScanBody swaps = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    return std::make_pair(std::vector<Tensor>{c[1], c[0] * x[0] + c[1] * 0.5, c[2]},
                          std::vector<Tensor>{c[0]});
  };
  // Inline kinds (add, sub, mul, neg, square) next to kernels called through their scalar twins
  // (tanh, exp, div, where, greater, maximum), and an output no loss term reads.
  ScanBody mixed = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor a = tanh(c[0] * x[0] - c[1] * 0.3);
    Tensor b = where(greater(a, c[1]), a, -c[1]) / (square(c[1]) + 1.0) + exp(-square(a)) * 0.1;
    return std::make_pair(std::vector<Tensor>{a, maximum(b, a * 0.5) + x[0]},
                          std::vector<Tensor>{a * b, square(x[0])});
  };
  const Tensor xs = randn(Axes{{"t", 9}}, 4) * 0.5;
  for (int64_t k : {1, 3, 4, 0})
    for (bool rev : {false, true}) {
      ScanOptions o;
      o.checkpoint_every = std::max<int64_t>(k, 1);
      o.memory_budget = k == 0 ? 120 : 0;  // 3 carries: bisection; 2: bisection; 1: every carry
      o.reverse = rev;
      SCOPED_TRACE("checkpoint_every=" + std::to_string(k) + " reverse=" + std::to_string(rev));
      expect_scan_matches_unrolled(swaps, {scalar(0.3), scalar(-0.8), scalar(1.1)}, xs, o);
      expect_scan_matches_unrolled(mixed, {scalar(0.4), scalar(0.2)}, xs, o);
      expect_scan_matches_unrolled(decay_body(scalar(0.9)), {scalar(0.5)}, xs, o);
    }
}

TEST(Scan, FusedScalarStepsEqualTheStepByStepReplay) {
  // The same scans with fused loops off (kernel programs replayed call by call): the fused loop
  // runs the same arithmetic, so values and gradients agree to rounding, float64 and float32.
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor u = astype(randn(Axes{{"t", 50}}, 11), dt);
    const Tensor lam = astype(scalar(0.95), dt), x0 = astype(scalar(0.25), dt);
    auto run = [&] {
      return value_and_grad(
          [](const std::vector<Tensor>& a) {
            ScanResult r = scan(decay_body(a[0]), {a[1]}, {a[2]}, "t");
            return sum(r.ys[0]) + square(r.carry[0]);
          },
          {lam, x0, u});
    };
    auto [v_fused, g_fused] = run();
    detail::set_scalar_loops(false);
    auto [v_steps, g_steps] = run();
    detail::set_scalar_loops(true);
    const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
    EXPECT_NEAR(v_fused.item(), v_steps.item(), tol * std::abs(v_steps.item()));
    for (size_t k = 0; k < 3; ++k)
      EXPECT_LT(mismatch(g_fused[k], g_steps[k], tol, tol), 1.0) << "argument " << k;
  }
  // A Jacobian: the forward pass fuses, the reverse sweep's cotangents carry a basis axis (more
  // than one element per step), so it replays call by call.
  auto ys = [](const std::vector<Tensor>& a) { return scan(decay_body(a[0]), {a[1]}, {a[2]}, "t").ys[0]; };
  const std::vector<Tensor> args{scalar(0.8), scalar(0.1), randn(Axes{{"t", 6}}, 12)};
  const std::vector<Tensor> j_fused = jacobian(ys, args);
  detail::set_scalar_loops(false);
  const std::vector<Tensor> j_steps = jacobian(ys, args);
  detail::set_scalar_loops(true);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_LT(mismatch(j_fused[k], j_steps[k], 1e-14, 1e-14), 1.0) << "argument " << k;
  EXPECT_EQ(j_fused[2].axes().describe(), "(t=6, t_in=6)");
}

TEST(Scan, FusedLoopsAsMachineCodeGiveTheHandlersBits) {
  // Long enough that the fused loops compile (ScalarLoop::kJitAfterSteps): the recurrence with its
  // loss emitted and carried, every checkpoint schedule, against the same scans with the loops
  // kept on the lowered code's handlers: the same bits in values and gradients.
  const Tensor u = randn(Axes{{"t", 2000}}, 21) * 0.1;
  // Schedules: every carry checkpointed with steps kept, the same recomputing every step, every
  // 16th carry, recursive bisection under a memory budget.
  auto run = [&](int schedule, bool carried) {
    return value_and_grad(
        [&](const std::vector<Tensor>& a) {
          ScanOptions o;
          if (schedule == 1) o.residual_budget = 0;
          if (schedule == 2) o.checkpoint_every = 16;
          if (schedule == 3) o.memory_budget = 400;
          const ScanBody body = [&a, carried](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
            const Tensor next = a[0] * c[0] + x[0];
            if (carried)
              return std::make_pair(std::vector<Tensor>{next, c[1] + next * next}, std::vector<Tensor>{});
            return std::make_pair(std::vector<Tensor>{next, c[1]}, std::vector<Tensor>{next * next});
          };
          ScanResult r = scan(body, {a[1], scalar(0.0)}, {a[2]}, "t", o);
          return carried ? r.carry[1] : sum(r.ys[0]);
        },
        {scalar(0.9), scalar(0.25), u});
  };
  auto bits = [](const Tensor& t) {
    const std::vector<double> v = t.to_vector();
    std::vector<uint64_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(double));
    return b;
  };
  for (int k = 0; k < 4; ++k)
    for (bool carried : {false, true}) {
      const int64_t before = detail::scalar_jit_loops();
      auto [v_code, g_code] = run(k, carried);
      const bool compiled = detail::scalar_jit_loops() > before;
      const bool was = detail::scalar_jit_enabled();
      detail::set_scalar_jit(false);
      auto [v_handlers, g_handlers] = run(k, carried);
      detail::set_scalar_jit(was);
      // (Later runs may take back loops an earlier one compiled: a reused scan program keeps them.)
      if (k == 0 && !carried && !compiled)
        GTEST_SKIP() << "no machine code for fused loops here (not x86-64 Linux, or refused)";
      EXPECT_EQ(bits(v_code), bits(v_handlers)) << "schedule " << k << " carried " << carried;
      for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(bits(g_code[i]), bits(g_handlers[i])) << "argument " << i << ", schedule " << k;
      EXPECT_NE(g_code[0].item(), 0.0);
    }
}

TEST(Scan, AFailingFactorisationNamesTheStep) {
  // The matrix is positive definite while x_t > 0; x_5 < 0 breaks it at step 5 (a replayed step).
  std::vector<double> xv(8, 1.0);
  xv[5] = -1.0;
  Tensor xs = tensor(xv, Axes{{"t", 8}});
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor a = broadcast(x[0], Axes{{"r", 1}, {"q", 1}});
    return std::make_pair(std::vector<Tensor>{c[0] + sum(cholesky(a, "r", "q"))}, std::vector<Tensor>{});
  };
  expect_error<NumericError>(
      [&] { (void)scan(body, {scalar(0.0)}, {xs}, "t"); },
      "[cholesky] at scan step 5: the matrix at batch index 0 is not positive definite");
  // A triangular solve whose diagonal reaches zero at step 6 (2 x 2, replayed resolved).
  std::vector<double> dv(8, 1.0);
  dv[6] = 0.0;
  Tensor ds = tensor(dv, Axes{{"t", 8}});
  ScanBody solve_body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor t = identity(2, "r", "q") * x[0] + tensor({{0.0, 0.0}, {0.5, 0.0}}, "r", "q");
    Tensor z = triangular_solve(t, c[0], "r", "q");
    return std::make_pair(std::vector<Tensor>{rename(z, "q", "r") * 0.5}, std::vector<Tensor>{});
  };
  expect_error<NumericError>(
      [&] {
        (void)scan(solve_body, {tensor({1.0, 2.0}, "r")}, {ds}, "t");
      },
      "[triangular_solve] at scan step 6: the matrix at batch index 0 has a zero on its diagonal");
}

TEST(Scan, ErrorsSayWhatIsWrong) {
  Tensor u = randn(Axes{{"t", 4}}, 1);
  int calls = 0;
  ScanBody changing = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor n = (calls++ == 0) ? c[0] + x[0] : c[0] * x[0];
    return std::make_pair(std::vector<Tensor>{n}, std::vector<Tensor>{});
  };
  expect_error<Error>([&] { (void)scan(changing, {scalar(0.0)}, {u}, "t"); }, "different ops at step 1");
  ScanBody reads = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor n = c[0].item() > 0 ? c[0] + x[0] : c[0] - x[0];
    return std::make_pair(std::vector<Tensor>{n}, std::vector<Tensor>{});
  };
  expect_error<Error>([&] { (void)scan(reads, {scalar(0.0)}, {u}, "t"); }, "[item] a scan body reads the value");
  ScanBody grows = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    return std::make_pair(std::vector<Tensor>{c[0] + broadcast(x[0], Axes{{"k", 2}})}, std::vector<Tensor>{});
  };
  expect_error<ShapeError>([&] { (void)scan(grows, {scalar(0.0)}, {u}, "t"); }, "carry 0 changes from ()");
  expect_error<AxisError>([&] { (void)scan(decay_body(scalar(1.0)), {scalar(0.0)}, {u}, "s"); }, "has no axis 's'");
  expect_error<ShapeError>(
      [&] { (void)scan(decay_body(scalar(1.0)), {scalar(0.0)}, {u, randn(Axes{{"t", 5}}, 2)}, "t"); }, "has 5 steps");
  expect_error<Error>([&] { (void)scan(decay_body(scalar(1.0)), {scalar(0.0)}, {}, "t"); }, "options.length");
  ScanOptions tight;
  tight.memory_budget = 16;
  expect_error<MemoryError>(
      [&] {
        Tape tape;
        Tensor lam = tape.watch(scalar(0.5));
        (void)scan(decay_body(lam), {scalar(0.0)}, {randn(Axes{{"t", 1000}}, 1)}, "t", tight);
      },
      "need at least 11");
  ScanBody nested = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    ScanResult inner = scan(decay_body(scalar(1.0)), {c[0]}, {broadcast(x[0], Axes{{"s", 2}})}, "s");
    return std::make_pair(inner.carry, std::vector<Tensor>{});
  };
  expect_error<Error>([&] { (void)scan(nested, {scalar(0.0)}, {u}, "t"); }, "[scan] inside a scan body is not supported yet");
}

}  // namespace
}  // namespace tenax
