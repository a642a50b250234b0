// scan: validation, the forward loop over a traced plan, carry checkpoints, and the reverse pass
// (a custom node on the enclosing tape) with every-k or binomial (bisection) checkpointing.
#include "tenax/autodiff/scan.h"

#include <cmath>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/scan_plan.h"
#include "tenax/core/ops.h"

namespace tenax {
namespace {

using detail::ScanPlan;

const Name kCheckpointAxis("__scan_checkpoint");

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(itemsize(t.dtype())); }

// The slices of a tensor along `over`, as one view handle moved from step to step (no view is
// built per step).
class Slices {
 public:
  Slices() = default;
  Slices(const Tensor& t, Name over) : view_(select(t, over, 0)), base_(view_.offset()), stride_(t.stride(over)) {}
  const Tensor& at(int64_t i) {
    detail::TensorAccess::offset(view_) = base_ + i * stride_;
    return view_;
  }

 private:
  Tensor view_;
  int64_t base_ = 0, stride_ = 0;
};

// Everything one scan call needs again in its reverse pass.
struct ScanRun final : detail::CustomNode {
  std::shared_ptr<ScanPlan> plan;
  std::vector<Tensor> init, xs;
  Name over;
  int64_t steps = 0;
  ScanOptions opt;
  std::vector<Tensor> checkpoints;  // per carry: (__scan_checkpoint, carry axes...), every-k mode
  int64_t snapshot_slots = -1;      // binomial mode: carries the reverse pass may hold at once

  const char* name() const override { return "scan"; }
  int64_t residual_bytes() const override {
    int64_t b = 0;
    for (const Tensor& t : checkpoints) b += bytes_of(t);
    return b;
  }

  std::vector<Slices> x_slices;

  [[nodiscard]] int64_t index(int64_t s) const { return opt.reverse ? steps - 1 - s : s; }

  // A values array for replaying the plan, with the parameters (fixed for every step) bound.
  [[nodiscard]] std::vector<Tensor> new_values() const {
    std::vector<Tensor> values(plan->n_vars());
    for (size_t p = 0; p < plan->params().size(); ++p) values[static_cast<size_t>(plan->param_var(p))] = plan->params()[p];
    return values;
  }

  // values for step s from its incoming carry.
  void bind(std::vector<Tensor>& values, const std::vector<Tensor>& carry, int64_t s) {
    const size_t nc = carry.size();
    for (size_t k = 0; k < nc; ++k) values[k] = carry[k];
    for (size_t k = 0; k < x_slices.size(); ++k) values[nc + k] = x_slices[k].at(index(s));
  }

  // Replaces `carry` (the carry into step s) by the carry after it.
  void advance(std::vector<Tensor>& values, std::vector<Tensor>& carry, int64_t s) {
    bind(values, carry, s);
    plan->forward(values);
    for (size_t k = 0; k < carry.size(); ++k) carry[k] = plan->value(values, plan->carry_out()[k]);
  }

  // Reverse pass state.
  std::vector<Tensor> carry_bar, ys_bar, xs_adj, param_adj;
  std::vector<Slices> xs_adj_slices, ys_bar_slices;
  std::vector<char> needs;

  void backward_step(std::vector<Tensor>& values, std::vector<Tensor>& adjoints, const std::vector<Tensor>& carry,
                     int64_t s) {
    bind(values, carry, s);
    plan->forward(values);
    adjoints.resize(plan->n_vars());
    for (Tensor& a : adjoints)
      if (a.defined()) a = Tensor();
    for (size_t p = 0; p < param_adj.size(); ++p)
      if (param_adj[p].defined()) adjoints[static_cast<size_t>(plan->param_var(p))] = param_adj[p];
    const size_t nc = init.size();
    for (size_t k = 0; k < xs_adj.size(); ++k)
      if (xs_adj[k].defined()) adjoints[nc + k] = xs_adj_slices[k].at(index(s));
    for (size_t k = 0; k < nc; ++k) {
      const int32_t v = plan->carry_out()[k].var;
      if (carry_bar[k].defined() && v >= 0 && needs[static_cast<size_t>(v)])
        detail::accumulate(plan->adjoint(values, adjoints, v), carry_bar[k]);
    }
    for (size_t k = 0; k < ys_bar.size(); ++k) {
      const int32_t v = plan->y_out()[k].var;
      if (ys_bar[k].defined() && v >= 0 && needs[static_cast<size_t>(v)])
        detail::accumulate(plan->adjoint(values, adjoints, v), ys_bar_slices[k].at(s));
    }
    plan->backward(values, adjoints, needs);
    for (size_t k = 0; k < nc; ++k) carry_bar[k] = adjoints[k];
  }

  // Steps b-1 .. a backwards, from the carry into step a, holding at most `slots` more carries.
  void reverse_range(std::vector<Tensor>& values, std::vector<Tensor>& adjoints, const std::vector<Tensor>& carry_a,
                     int64_t a, int64_t b, int64_t slots) {
    if (b - a == 1) {
      backward_step(values, adjoints, carry_a, a);
      return;
    }
    const int64_t m = a + (b - a) / 2;
    std::vector<Tensor> c = carry_a;
    for (int64_t s = a; s < m; ++s) advance(values, c, s);
    reverse_range(values, adjoints, c, m, b, slots - 1);
    reverse_range(values, adjoints, carry_a, a, m, slots);
  }

  void vjp(const std::vector<Tensor>& cot, const std::vector<Tensor>& adj) override {
    detail::PauseRecording pause;
    const size_t nc = init.size(), nx = xs.size();
    carry_bar.assign(cot.begin(), cot.begin() + static_cast<std::ptrdiff_t>(nc));
    ys_bar.assign(cot.begin() + static_cast<std::ptrdiff_t>(nc), cot.end());
    xs_adj.assign(adj.begin() + static_cast<std::ptrdiff_t>(nc), adj.begin() + static_cast<std::ptrdiff_t>(nc + nx));
    param_adj.assign(adj.begin() + static_cast<std::ptrdiff_t>(nc + nx), adj.end());
    std::vector<char> x_needs(nx);
    xs_adj_slices.assign(nx, Slices());
    ys_bar_slices.assign(ys_bar.size(), Slices());
    for (size_t k = 0; k < nx; ++k) {
      x_needs[k] = xs_adj[k].defined();
      if (x_needs[k]) xs_adj_slices[k] = Slices(xs_adj[k], over);
    }
    for (size_t k = 0; k < ys_bar.size(); ++k)
      if (ys_bar[k].defined()) ys_bar_slices[k] = Slices(ys_bar[k], over);
    needs = plan->needs_grad(x_needs);
    std::vector<Tensor> values = new_values(), adjoints;
    if (snapshot_slots >= 0) {
      reverse_range(values, adjoints, init, 0, steps, snapshot_slots);
    } else {
      const int64_t k = opt.checkpoint_every;
      std::vector<std::vector<Tensor>> segment;
      for (int64_t c = ((steps - 1) / k) * k; c >= 0; c -= k) {
        const int64_t e = std::min(c + k, steps);
        segment.assign(1, {});
        for (size_t j = 0; j < nc; ++j) segment[0].push_back(select(checkpoints[j], kCheckpointAxis, c / k));
        for (int64_t s = c; s + 1 < e; ++s) {
          segment.push_back(segment.back());
          advance(values, segment.back(), s);
        }
        for (int64_t s = e - 1; s >= c; --s) backward_step(values, adjoints, segment[static_cast<size_t>(s - c)], s);
      }
    }
    for (size_t k = 0; k < nc; ++k)
      if (adj[k].defined() && carry_bar[k].defined()) detail::accumulate(adj[k], carry_bar[k]);
    carry_bar.clear();
    ys_bar.clear();
    xs_adj.clear();
    param_adj.clear();
  }
};

void check_carry(const std::vector<Tensor>& init, const std::vector<Tensor>& out, int64_t step) {
  if (out.size() != init.size())
    throw ShapeError("[scan] the body returned " + std::to_string(out.size()) + " carries at step " +
                     std::to_string(step) + " but init has " + std::to_string(init.size()));
  for (size_t k = 0; k < init.size(); ++k)
    if (!out[k].axes().same_set(init[k].axes()) || out[k].dtype() != init[k].dtype())
      throw ShapeError("[scan] carry " + std::to_string(k) + " changes from " + init[k].axes().describe() + " " +
                       dtype_name(init[k].dtype()) + " to " + out[k].axes().describe() + " " +
                       dtype_name(out[k].dtype()) + " at step " + std::to_string(step) +
                       "; a carry keeps its axes, sizes and dtype");
}

}  // namespace

ScanResult scan(const ScanBody& body, const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                const ScanOptions& options) {
  if (detail::g_record_state.trace)
    throw Error("[scan] a scan inside a scan body is not supported yet; run it outside the body");
  if (options.checkpoint_every < 1)
    throw Error("[scan] checkpoint_every must be >= 1, got " + std::to_string(options.checkpoint_every));
  if (options.memory_budget < 0) throw Error("[scan] memory_budget must be >= 0 bytes");
  int64_t steps = options.length;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].defined()) throw Error("[scan] xs " + std::to_string(k) + " is undefined");
    if (!xs[k].has_axis(over))
      throw AxisError("[scan] xs " + std::to_string(k) + " " + xs[k].axes().describe() + " has no axis '" + over.str() +
                      "' to scan over");
    const int64_t n = xs[k].size(over);
    if (steps >= 0 && n != steps)
      throw ShapeError("[scan] xs " + std::to_string(k) + " " + xs[k].axes().describe() + " has " + std::to_string(n) +
                       " steps along '" + over.str() + "' but " +
                       (k == 0 ? "options.length is " : "xs 0 has ") + std::to_string(steps));
    steps = n;
  }
  if (steps < 0) throw Error("[scan] with no xs, set options.length to the number of steps");
  if (steps == 0) throw ShapeError("[scan] the axis '" + over.str() + "' has no steps");
  for (size_t k = 0; k < init.size(); ++k) {
    if (!init[k].defined()) throw Error("[scan] init carry " + std::to_string(k) + " is undefined");
    if (!is_floating(init[k].dtype()))
      throw DTypeError("[scan] init carry " + std::to_string(k) + " is " + dtype_name(init[k].dtype()) +
                       "; carries are float64 or float32");
  }

  auto run = std::make_shared<ScanRun>();
  run->init = init;
  run->xs = xs;
  run->over = over;
  run->steps = steps;
  run->opt = options;
  detail::Recorder* outer = detail::g_record_state.recorder;
  const uint32_t outer_serial = outer ? detail::g_record_state.serial : 0;

  std::vector<Tensor> carry = init, next, y;
  std::vector<Tensor> values, ys;
  auto x_at = [&](int64_t s) {
    std::vector<Tensor> x;
    for (const Tensor& t : xs) x.push_back(select(t, over, run->index(s)));
    return x;
  };
  std::vector<Slices> y_slices;
  auto store_y = [&](const std::vector<Tensor>& yt, int64_t s) {
    if (s == 0)
      for (const Tensor& t : yt) {
        Axes ax{{over, steps}};
        for (int i = 0; i < t.rank(); ++i) ax.push_back(t.axes()[i]);
        ys.push_back(empty(ax, t.dtype(), t.device()));
        y_slices.emplace_back(ys.back(), over);
      }
    if (yt.size() != ys.size())
      throw ShapeError("[scan] the body returned " + std::to_string(yt.size()) + " outputs at step " + std::to_string(s) +
                       " but " + std::to_string(ys.size()) + " at step 0");
    for (size_t k = 0; k < yt.size(); ++k) detail::copy_into(y_slices[k].at(s), yt[k]);
  };

  // Step 0 and step 1 are traced; the plans must agree. Later steps replay the plan.
  run->plan = ScanPlan::trace(body, carry, x_at(0), outer_serial, next, y);
  check_carry(init, next, 0);
  bool record = !run->plan->params().empty();
  for (const Tensor& t : init) record |= detail::is_tracked(t);
  for (const Tensor& t : xs) record |= detail::is_tracked(t);
  record &= outer != nullptr;

  if (record) {
    int64_t carry_bytes = 0;
    for (const Tensor& t : init) carry_bytes += bytes_of(t);
    if (options.memory_budget > 0 && carry_bytes * steps > options.memory_budget) {
      const int64_t slots = options.memory_budget / std::max<int64_t>(carry_bytes, 1);
      const auto need = static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(steps)))) + 1;
      if (slots < need)
        throw MemoryError("[scan] memory_budget " + std::to_string(options.memory_budget) + " bytes holds " +
                          std::to_string(slots) + " carries of " + std::to_string(carry_bytes) + " bytes; " +
                          std::to_string(steps) + " steps need at least " + std::to_string(need) + " (" +
                          std::to_string(need * carry_bytes) + " bytes)");
      run->snapshot_slots = slots;
    } else {
      if (options.memory_budget > 0) run->opt.checkpoint_every = 1;
      const int64_t n_ck = (steps + run->opt.checkpoint_every - 1) / run->opt.checkpoint_every;
      for (const Tensor& t : init) {
        Axes ax{{kCheckpointAxis, n_ck}};
        for (int i = 0; i < t.rank(); ++i) ax.push_back(t.axes()[i]);
        run->checkpoints.push_back(empty(ax, t.dtype(), t.device()));
      }
    }
  }
  std::vector<Slices> ck_slices;
  for (const Tensor& t : run->checkpoints) ck_slices.emplace_back(t, kCheckpointAxis);
  auto checkpoint = [&](const std::vector<Tensor>& c, int64_t s) {
    if (!record || run->snapshot_slots >= 0 || s % run->opt.checkpoint_every != 0) return;
    for (size_t k = 0; k < c.size(); ++k) detail::copy_into(ck_slices[k].at(s / run->opt.checkpoint_every), c[k]);
  };

  {
    detail::PauseRecording pause;
    checkpoint(carry, 0);
    store_y(y, 0);
    carry = next;
    if (steps > 1) {
      checkpoint(carry, 1);
      auto again = ScanPlan::trace(body, carry, x_at(1), outer_serial, next, y);
      std::string diff = run->plan->difference(*again);
      if (!diff.empty())
        throw Error("[scan] the body ran different ops at step 1 than at step 0 (" + diff +
                    "); a scan body must run the same ops every step: branch with where(), not with C++ control "
                    "flow on values or on the step");
      check_carry(init, next, 1);
      store_y(y, 1);
      carry = next;
    }
    values = run->new_values();
    for (const Tensor& t : xs) run->x_slices.emplace_back(t, over);
    const std::vector<detail::PlanRef>& y_out = run->plan->y_out();
    for (int64_t s = 2; s < steps; ++s) {
      checkpoint(carry, s);
      run->advance(values, carry, s);
      for (size_t k = 0; k < y_out.size(); ++k) detail::copy_into(y_slices[k].at(s), run->plan->value(values, y_out[k]));
    }
  }

  ScanResult result{carry, ys};
  if (record) {
    std::vector<Tensor> inputs = init, outputs = result.carry;
    inputs.insert(inputs.end(), xs.begin(), xs.end());
    inputs.insert(inputs.end(), run->plan->params().begin(), run->plan->params().end());
    outputs.insert(outputs.end(), result.ys.begin(), result.ys.end());
    outer->record_custom(run, inputs, outputs);
    result.carry.assign(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(init.size()));
    result.ys.assign(outputs.begin() + static_cast<std::ptrdiff_t>(init.size()), outputs.end());
  }
  return result;
}

}  // namespace tenax
