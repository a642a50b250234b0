// scan's kept intermediates: the steps' values a reverse pass reads back instead of recomputing
// them, within one residual budget per tape (Tape::set_residual_budget) and under the host's
// memory budget; gradients equal to the recomputing pass's bits, the bytes counted.
#include <cmath>
#include <utility>
#include <vector>

#include "op_check.h"
#include "scan_rnn.h"

namespace tenax {
namespace {

using testing::mismatch;
using testing::Rnn;
using testing::rnn_inputs;

// The RNN step plus c * x: a reverse rule that reads x_t.
ScanBody rnn_reading_x(const Tensor& w, const Tensor& b) {
  return [w, b](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    auto [next, y] = Rnn{w, b}(c, x);
    return std::make_pair(std::vector<Tensor>{next[0] + c[0] * x[0] * 0.1}, y);
  };
}

TEST(Scan, KeptIntermediatesGiveTheRecomputedGradientsAndCountAsResiduals) {
  // Steps on vectors and matrices (not fused) keep each step's intermediates in the forward pass
  // when they fit ScanOptions::residual_budget, and the reverse pass reads them back instead of
  // recomputing the step. The gradients must be the recomputing pass's to the bit, in both
  // directions (x_t is loaded again before each kept step's reverse step: the rule of c * x reads it), with the bytes kept
  // on the tape's count; a budget they do not all fit keeps as many steps as it holds (the
  // others recomputed: kept and recomputed steps in one pass), one that holds no step carries only.
  std::vector<Tensor> args = rnn_inputs();
  args[3] = randn(Axes{{"t", 40}, {"h", 3}}, 8);
  const auto body = rnn_reading_x;
  for (bool rev : {false, true}) {
    auto run = [&](int64_t budget, int64_t* kept) {
      Tape tape;
      std::vector<Tensor> a;
      for (const Tensor& t : args) a.push_back(tape.watch(t));
      ScanOptions o;
      o.reverse = rev;
      o.residual_budget = budget;
      ScanResult r = scan(body(a[0], a[1]), {a[2]}, {a[3]}, "t", o);
      *kept = tape.stats().residual_bytes;
      return tape.gradient(sum(r.ys[0]) + sum(r.carry[0] * r.carry[0]), a);
    };
    int64_t carries_only = 0, with_steps = 0, too_small = 0, some = 0, a_third = 0;
    const std::vector<Tensor> ref = run(0, &carries_only);
    const std::vector<Tensor> kept = run(int64_t{64} << 20, &with_steps);
    const std::vector<Tensor> tight = run(16, &too_small);
    EXPECT_EQ(carries_only, 40 * 3 * 8);
    EXPECT_EQ(too_small, carries_only);
    // Steps 3..39 are kept (0 and 1 are traced, 2 captured): at least the step's tanh, an
    // h-vector (3 float64; not the carry into the step, which its checkpoint holds).
    const int64_t all = with_steps - carries_only, per_step = all / 37;
    EXPECT_EQ(all % 37, 0) << "reverse=" << rev;
    EXPECT_GE(per_step, 3 * 8) << "reverse=" << rev;
    // Budgets that hold some of the steps: as many whole steps as fit.
    const std::vector<Tensor> partly = run(1000, &some), third = run(all / 3, &a_third);
    EXPECT_EQ(some - carries_only, 1000 / per_step * per_step) << "reverse=" << rev;
    EXPECT_EQ(a_third - carries_only, all / 3 / per_step * per_step) << "reverse=" << rev;
    for (size_t k = 0; k < ref.size(); ++k) {
      EXPECT_EQ(kept[k].to_vector(), ref[k].to_vector()) << "argument " << k << " reverse=" << rev;
      EXPECT_EQ(tight[k].to_vector(), ref[k].to_vector()) << "argument " << k << " reverse=" << rev;
      EXPECT_EQ(partly[k].to_vector(), ref[k].to_vector()) << "argument " << k << " reverse=" << rev;
      EXPECT_EQ(third[k].to_vector(), ref[k].to_vector()) << "argument " << k << " reverse=" << rev;
    }
    // And the recomputing pass is right: against the unrolled loop (rnn_loss_unrolled's body).
    auto unrolled = [&](const std::vector<Tensor>& a) {
      std::vector<Tensor> c{a[2]};
      Tensor total = scalar(0.0);
      for (int s = 0; s < 40; ++s) {
        auto [next, y] = body(a[0], a[1])(c, {select(a[3], "t", rev ? 39 - s : s)});
        total = total + y[0];
        c = next;
      }
      return total + sum(c[0] * c[0]);
    };
    const std::vector<Tensor> loop = grad(unrolled, args);
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_LT(mismatch(kept[k], loop[k], 1e-11, 1e-12), 1.0) << "argument " << k << " reverse=" << rev;
  }
}

TEST(Scan, KeptLstmStepsGiveTheRecomputedGradients) {
  // An LSTM cell: the kept buffers are what its reverse step reads (gates, tanh of the cell, the
  // carries into the step), not its new carries; the gradients are the recomputing pass's bits.
  const int64_t units = 4;
  Tensor wx0 = randn(Axes{{"in", 3}, {"gate", 4 * units}}, 31) * 0.4, wh0 = randn(Axes{{"unit", units}, {"gate", 4 * units}}, 32) * 0.4;
  Tensor xs = randn(Axes{{"t", 30}, {"batch", 5}, {"in", 3}}, 33);
  auto gate = [&](const Tensor& z, int k) { return rename(slice(z, "gate", k * units, (k + 1) * units), "gate", "unit"); };
  auto run = [&](int64_t budget, int64_t* kept) {
    Tape tape;
    tape.set_residual_budget(budget);
    Tensor wx = tape.watch(wx0), wh = tape.watch(wh0);
    ScanBody body = [&, wx, wh](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      Tensor z = dot(x[0], wx, {"in"}) + dot(c[0], wh, {"unit"});
      Tensor cell = sigmoid(gate(z, 1)) * c[1] + sigmoid(gate(z, 0)) * tanh(gate(z, 2));
      Tensor h = sigmoid(gate(z, 3)) * tanh(cell);
      return std::make_pair(std::vector<Tensor>{h, cell}, std::vector<Tensor>{h});
    };
    const Tensor zero = zeros(Axes{{"batch", 5}, {"unit", units}});
    ScanResult r = scan(body, {zero, zero}, {xs}, "t");
    *kept = tape.stats().residual_bytes;
    return tape.gradient(sum(r.ys[0] * r.ys[0]) + sum(r.carry[1]), {wx, wh});
  };
  int64_t none = 0, kept = 0;
  const std::vector<Tensor> ref = run(0, &none), with = run(kDefaultResidualBudget, &kept);
  // each kept step holds at least the four gates and tanh of the cell (5 x 20 float64)
  EXPECT_GE(kept, none + 27 * 5 * 20 * 8);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(with[k].to_vector(), ref[k].to_vector()) << "argument " << k;
}

TEST(Scan, ScansOnOneTapeShareItsResidualBudget) {
  // Two scans recorded on one tape draw their kept intermediates from the tape's one budget
  // (Tape::set_residual_budget): with room for one and a half scans', the first keeps its steps
  // and the second as many of its steps as the rest holds, recomputing the others; the tape's
  // residual count and the allocator's peak say so, and the gradients are the same bits
  // whatever is kept.
  std::vector<Tensor> args = rnn_inputs();
  args[3] = randn(Axes{{"t", 40}, {"h", 3}}, 8);
  const auto body = rnn_reading_x;
  struct Run {
    std::vector<Tensor> grads;
    int64_t residuals = 0, peak = 0;
  };
  auto run = [&](int scans, int64_t budget) {
    Tape tape;
    if (budget >= 0) tape.set_residual_budget(budget);
    std::vector<Tensor> a;
    for (const Tensor& t : args) a.push_back(tape.watch(t));
    allocator_for(Device::cpu()).reset_stats();
    const int64_t base = allocator_stats().bytes_in_use;
    Tensor loss = scalar(0.0), h = a[2];
    for (int k = 0; k < scans; ++k) {
      ScanResult r = scan(body(a[0], a[1]), {h}, {a[3]}, "t");
      h = r.carry[0];
      loss = loss + sum(r.ys[0]);
    }
    Run out;
    out.residuals = tape.stats().residual_bytes;
    out.peak = allocator_stats().peak_bytes - base;
    out.grads = tape.gradient(loss + sum(h * h), a);
    return out;
  };
  const Run one_kept = run(1, -1), one_none = run(1, 0);
  // One scan's kept intermediates: its steps 3..39 (0 and 1 are traced, 2 captured).
  const int64_t steps = one_kept.residuals - one_none.residuals, per_step = steps / 37;
  ASSERT_GT(steps, 0);
  ASSERT_EQ(steps % 37, 0);
  const Run none = run(2, 0), room = run(2, steps + steps / 2), both = run(2, -1);
  // The second scan reuses the first's program (traces step 0 only): it can keep steps 2..39.
  EXPECT_EQ(both.residuals, none.residuals + 2 * steps + per_step);
  EXPECT_EQ(room.residuals, none.residuals + steps + steps / 2 / per_step * per_step);
  // The allocator saw the kept bytes: the first scan's and some more than none at the peak, at
  // least half a scan's fewer than both.
  EXPECT_GT(room.peak, none.peak + steps);
  EXPECT_LE(room.peak, both.peak - steps / 2);
  for (size_t k = 0; k < none.grads.size(); ++k) {
    EXPECT_EQ(room.grads[k].to_vector(), none.grads[k].to_vector()) << "argument " << k;
    EXPECT_EQ(both.grads[k].to_vector(), none.grads[k].to_vector()) << "argument " << k;
  }
  Tape tape;
  EXPECT_THROW(tape.set_residual_budget(-1), AutodiffError);
}

TEST(Scan, KeepingIntermediatesGivesWayToTheHostMemoryBudget) {
  // Keeping each step's intermediates is an optimisation: under a host memory budget
  // (set_memory_budget) that has no room for them, the scan recomputes its steps instead of
  // failing, with the same gradient. The RNN's new state through six more tanh: intermediates
  // (seven h-vectors a step) several times the scan's own buffers.
  std::vector<Tensor> args = rnn_inputs();
  args[3] = randn(Axes{{"t", 2000}, {"h", 3}}, 8);
  auto deep = [](const Tensor& w, const Tensor& b) {
    return [w, b](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      auto [next, y] = Rnn{w, b}(c, x);
      Tensor h = next[0];
      for (int k = 0; k < 6; ++k) h = tanh(h);
      return std::make_pair(std::vector<Tensor>{h}, y);
    };
  };
  auto grads = [&](int64_t* kept) {
    Tape tape;
    std::vector<Tensor> a;
    for (const Tensor& t : args) a.push_back(tape.watch(t));
    ScanResult r = scan(deep(a[0], a[1]), {a[2]}, {a[3]}, "t");
    *kept = tape.stats().residual_bytes;
    return tape.gradient(sum(r.ys[0]), a);
  };
  int64_t free_kept = 0, tight_kept = 0;
  const std::vector<Tensor> ref = grads(&free_kept);
  ASSERT_GT(free_kept, 2000 * 3 * 8 * 7);  // the intermediates were kept (what the reverse step reads)
  struct Restore {
    ~Restore() { set_memory_budget(Device::cpu(), 0); }
  } restore;
  // Room for the kept intermediates alone: not for them and the scan's own buffers (stacked ys,
  // checkpoints, the step's arena), which are allocated first; enough for those alone (~150 KB:
  // the intermediates take more, over 168 bytes a step).
  set_memory_budget(Device::cpu(), allocator_stats().bytes_in_use + free_kept);
  const std::vector<Tensor> tight = grads(&tight_kept);
  set_memory_budget(Device::cpu(), 0);
  EXPECT_EQ(tight_kept, 2000 * 3 * 8);  // carries only
  for (size_t k = 0; k < ref.size(); ++k)
    EXPECT_EQ(tight[k].to_vector(), ref[k].to_vector()) << "argument " << k;
}

}  // namespace
}  // namespace tenax
