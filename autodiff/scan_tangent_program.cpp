// Forward mode through a host scan, compiled: the first steps' values and tangents are captured as
// kernel programs on fixed buffers (the carries, x_t and their tangents), which the other steps
// replay with no dispatch, as the reverse pass replays its step programs. ScanRun::jvp takes this
// path where the tangents cover their whole batch from the first step (the windowed forward
// Jacobian w.r.t. a sequence's inputs, whose batch range changes per step, runs op by op) and the
// replays copy at most kCopiedTangentLimit bytes of carries' tangents per step.
#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/scan_run.h"
#include "tenax/core/env.h"
#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// Which variables can have a tangent: the carries, inputs and parameters given one, every op
// output downstream of one, and the carries whose new value is such an output (a fixpoint over
// the steps). An over-estimate: a rule may give no tangent where an input has one.
std::vector<char> tangent_vars(const ScanPlan& p, const std::vector<Tensor>& tangents) {
  const auto nc = static_cast<size_t>(p.n_carry()), nx = static_cast<size_t>(p.n_x());
  std::vector<char> has(p.n_vars(), 0);
  for (size_t k = 0; k < nc + nx; ++k) has[k] = tangents[k].defined();
  for (size_t k = 0; k < p.params().size(); ++k)
    has[static_cast<size_t>(p.param_var(k))] = tangents[nc + nx + k].defined();
  for (bool changed = true; changed;) {
    changed = false;
    for (const PlanOp& op : p.ops())
      for (int i = 0; i < op.n_inputs; ++i)
        if (const PlanRef r = p.input(op, i); r.var >= 0 && has[static_cast<size_t>(r.var)])
          has[static_cast<size_t>(op.out)] = 1;
    for (size_t k = 0; k < nc; ++k) {
      const PlanRef r = p.carry_out()[k];
      if (!has[k] && r.var >= 0 && has[static_cast<size_t>(r.var)] &&
          is_inexact(p.var(static_cast<int32_t>(k)).dtype)) {
        has[k] = 1;
        changed = true;
      }
    }
  }
  return has;
}

// The carries' tangents the replays may copy into their buffers per step, at most: the op-by-op
// steps hand the new tensors on instead, and beyond a few tens of KiB a copy costs more than the
// dispatch saves (the S5 layer's forward Jacobians, 64 and 512 KiB per step: 12% more instructions
// compiled with the copies at 512 KiB).
constexpr int64_t kCopiedTangentLimit = 32 << 10;
// A carry's tangent swaps between two buffers (TangentSweep) from this size: a smaller one is
// copied (the Kalman step's: alternating two programs cost 5% more instructions than the copies).
constexpr int64_t kSwapMin = 16 << 10;

// The programs of the even steps (phase 0, captured at the first) or of the odd ones (phase 1,
// captured at the second): the step (values, then tangents), the outputs' stores, the hand-on of
// the new carries and of the tangents that are copied, and (phase 1) the copies of swapped
// tangents it writes in another layout than phase 0 reads (TangentSweep::copied).
struct Phase {
  KernelProgram step, next, fix;
  std::vector<std::pair<size_t, SliceCopy>> stores;  // per output with a tangent: its store
  std::vector<Tensor> out_tan;                       // per swapped carry: the buffer its step writes
  bool built = false;
};

// One compiled sweep: the plan's values and tangents on fixed buffers (the carries', the inputs'
// filled by slice copies per step). A carry's tangent that an op of the step writes whole, in the
// carry's layout, and that nothing but the step reads, is not copied into the carry's buffer: the
// two phases write their own buffers and each reads the other's (swap; phase 0's reads moved by
// KernelProgram::read_in_place), so a large tangent (a forward Jacobian's basis) costs no copy.
struct TangentSweep {
  const ScanPlan& p;
  size_t nc, nx;
  std::vector<char> has, swap;
  std::vector<Tensor> values, tan, carry, carry_tan, ys_tan;
  std::vector<SliceCopy> loads;  // x_t and its tangent into their buffers
  std::vector<std::unique_ptr<KernelProgram::MovingBase>> bases;
  Phase phase[2];
  std::vector<size_t> copied;  // swapped carries whose tangents phase 1 copies (Phase::fix)

  TangentSweep(const ScanRun& r, const std::vector<Tensor>& tangents, const Axes& batch,
               std::vector<char> vars)
      : p(*r.plan),
        nc(r.init.size()),
        nx(r.xs.size()),
        has(std::move(vars)),
        swap(nc, 0),
        values(p.n_vars()),
        tan(p.n_vars()) {
    for (size_t k = 0; k < r.params.size(); ++k) {
      values[static_cast<size_t>(p.param_var(k))] = r.params[k];
      tan[static_cast<size_t>(p.param_var(k))] = tangents[nc + nx + k];
    }
    for (size_t k = 0; k < nc; ++k) {
      const PlanVar& v = p.var(static_cast<int32_t>(k));
      values[k] = empty(v.axes, v.dtype, r.init[k].device());
      copy_into(values[k], r.init[k]);
      bases.push_back(std::make_unique<KernelProgram::MovingBase>());
      if (!has[k]) continue;
      tan[k] = empty(with_batch(v.axes, batch), v.dtype, r.init[k].device());
      if (tangents[k].defined())
        copy_into(tan[k], tangents[k]);
      else
        fill_zero(tan[k]);
    }
    for (size_t j = 0; j < nx; ++j) {
      const PlanVar& v = p.var(static_cast<int32_t>(nc + j));
      values[nc + j] = empty(v.axes, v.dtype, r.xs[j].device());
      loads.emplace_back(values[nc + j], r.xs[j], r.over, true, false, true);
      if (!tangents[nc + j].defined()) continue;
      tan[nc + j] = empty(with_batch(v.axes, batch), v.dtype, r.xs[j].device());
      loads.emplace_back(tan[nc + j], tangents[nc + j], r.over, true, false, true);
    }
    carry.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(nc));
    carry_tan.assign(tan.begin(), tan.begin() + static_cast<std::ptrdiff_t>(nc));
  }

  // The step captured into `f`; then its stores of the outputs' tangents (the stacks made at the
  // first capture) where one reaches an output and some step of it is wanted.
  void capture_step(Phase& f, int64_t s, const Axes& batch, Name over, int64_t steps,
                    const std::vector<std::pair<int64_t, int64_t>>& wanted) {
    LoopPositionScope where("scan step", s);
    capture_into(f.step, [&] {
      p.forward(values);
      p.forward_tangent(values, tan, batch);
    });
    if (ys_tan.empty()) ys_tan.assign(p.y_out().size(), Tensor());
    for (size_t j = 0; j < ys_tan.size(); ++j) {
      const int32_t v = p.y_out()[j].var;
      if (v < 0 || !tan[static_cast<size_t>(v)].defined() || wanted[j].first >= wanted[j].second) continue;
      const Tensor& ty = tan[static_cast<size_t>(v)];
      if (!ys_tan[j].defined()) {
        Axes ax{{over, steps}};
        for (int i = 0; i < ty.rank(); ++i) ax.push_back(ty.axes()[i]);
        ys_tan[j] = empty(ax, ty.dtype(), ty.device());
      }
      f.stores.emplace_back(j, SliceCopy(ty, ys_tan[j], over, false, false));  // unstaged: two phases
    }
  }

  // The new tangent of carry k where the step writes it whole in the carry's layout: its buffer.
  [[nodiscard]] const Tensor* written_whole(size_t k) const {
    const int32_t r = p.carry_out()[k].var;
    if (!has[k] || r < 0 || p.var(r).kind != VarKind::op) return nullptr;
    const Tensor& t = tan[static_cast<size_t>(r)];
    if (!t.defined() || !(t.axes() == carry_tan[k].axes()) || !t.is_contiguous()) return nullptr;
    return &t;
  }

  // The buffers of the tangents the sweep holds outside the step's own (`outside`: those read
  // after the step, handed on or stored — a rule may lend one its input's tangent).
  [[nodiscard]] std::vector<const Storage*> held_buffers(bool outside) const {
    std::vector<const Storage*> held;
    auto add = [&](const Tensor& t) {
      if (t.defined()) held.push_back(t.storage().get());
    };
    if (outside) {
      for (const std::vector<PlanRef>* refs : {&p.carry_out(), &p.y_out()})
        for (const PlanRef& r : *refs)
          if (r.var >= 0) add(tan[static_cast<size_t>(r.var)]);
      return held;
    }
    for (size_t v = 0; v < nc + nx; ++v) add(tan[v]);
    for (size_t k = 0; k < p.params().size(); ++k) add(tan[static_cast<size_t>(p.param_var(k))]);
    return held;
  }

  // Whether var v (a carry into the step) is handed on or output as it is.
  [[nodiscard]] bool referenced(int32_t v) const {
    for (const std::vector<PlanRef>* refs : {&p.carry_out(), &p.y_out()})
      for (const PlanRef& r : *refs)
        if (r.var == v) return true;
    return false;
  }

  // After phase 0's step: the carries whose tangents swap (see TangentSweep).
  void choose_swaps() {
    std::vector<const Storage*> held = held_buffers(false);
    const std::vector<const Storage*> outside = held_buffers(true);
    auto in = [](const std::vector<const Storage*>& list, const Tensor& t) {
      return t.defined() && std::find(list.begin(), list.end(), t.storage().get()) != list.end();
    };
    for (size_t k = 0; k < nc; ++k) {
      const Tensor* t = written_whole(k);
      const Tensor& buf = carry_tan[k];
      if (!t || in(outside, buf) || referenced(static_cast<int32_t>(k)) || in(held, *t) ||
          bytes_of(*t) < kSwapMin)
        continue;
      // Phase 0's calls read the tangent into the step through bases[k] (at the carry's buffer
      // until link_phases points it at phase 1's): not where some call cannot be redirected.
      *bases[k] = {static_cast<const char*>(buf.data_ptr()), 0};
      if (phase[0].step.read_in_place(buf.data_ptr(), bytes_of(buf), bases[k].get()) < 0) continue;
      swap[k] = 1;
      held.push_back(t->storage().get());
      phase[0].out_tan.resize(nc);
      phase[0].out_tan[k] = *t;
    }
  }

  // Before phase 1's step: it reads the swapped tangents where phase 0 wrote them.
  void read_phase_0() {
    for (size_t k = 0; k < nc; ++k)
      if (swap[k]) tan[k] = phase[0].out_tan[k];
  }

  // After phase 1's step: phase 0 reads the swapped tangents where phase 1 writes them, or where
  // phase 1 writes another layout, phase 1 copies them into the carry's buffer.
  void link_phases() {
    phase[1].out_tan.resize(nc);
    for (size_t k = 0; k < nc; ++k) {
      if (!swap[k]) continue;
      const Tensor* t = written_whole(k);
      phase[1].out_tan[k] = t ? *t : tan[static_cast<size_t>(p.carry_out()[k].var)];
      if (t)
        *bases[k] = {static_cast<const char*>(t->data_ptr()), 0};
      else
        copied.push_back(k);
    }
    capture_into(phase[1].fix, [&] {
      for (size_t k : copied) copy_into(carry_tan[k], phase[1].out_tan[k]);
    });
  }

  // The hand-on program of `f`: the new carries and the tangents that do not swap.
  void capture_next(Phase& f) {
    capture_into(f.next, [&] {
      std::vector<Tensor> v(nc), vt(nc), into = carry_tan;
      for (size_t k = 0; k < nc; ++k) {
        const int32_t r = p.carry_out()[k].var;
        v[k] = p.value(values, p.carry_out()[k]);
        if (swap[k]) into[k] = Tensor();
        if (r < 0 || swap[k]) continue;
        vt[k] = tan[static_cast<size_t>(r)];
        if (vt[k].defined() && !has[k])
          throw AutodiffError("[jvp] internal: a scan carry's tangent appeared where none was expected");
      }
      hand_on(carry, v, carry);
      hand_on(into, vt, carry_tan);
    });
  }

  [[nodiscard]] bool swapping() const { return std::find(swap.begin(), swap.end(), 1) != swap.end(); }

  // The bytes of carries' tangents the replays copy per step (not those handed on unchanged).
  [[nodiscard]] int64_t copied_bytes() const {
    int64_t n = 0;
    for (size_t k = 0; k < nc; ++k) {
      const bool fixed = std::find(copied.begin(), copied.end(), k) != copied.end();
      if (has[k] && p.carry_out()[k].var != static_cast<int32_t>(k) && (!swap[k] || fixed))
        n += bytes_of(carry_tan[k]);
    }
    return n;
  }

  // Step s (slice t): the first two build the phases' programs, the others replay them. False
  // where, both built, the replays would copy large tangents per step (then the op-by-op steps,
  // which hand the new tensors on, run the scan instead, from the start).
  bool run_step(int64_t s, int64_t t, const Axes& batch, Name over, int64_t steps,
                const std::vector<std::pair<int64_t, int64_t>>& wanted) {
    for (SliceCopy& c : loads) c.run(t);
    Phase& f = phase[swapping() ? s % 2 : 0];
    const bool build = !f.built;
    if (build) {
      if (s == 1) read_phase_0();
      capture_step(f, s, batch, over, steps, wanted);
      if (s == 0)
        choose_swaps();
      else
        link_phases();
    } else {
      f.step.run("scan step", s);
    }
    for (auto& [j, c] : f.stores)
      if (t >= wanted[j].first && t < wanted[j].second) c.run(t);
    if (!build) {
      f.next.run("scan step", s);
      f.fix.run("scan step", s);
      return true;
    }
    capture_next(f);
    f.built = true;
    const bool both = s == 1 || !swapping();
    return !(both && steps > 2 && copied_bytes() > kCopiedTangentLimit);
  }

  // The carries' tangents after step s (undefined where none can reach a carry).
  [[nodiscard]] std::vector<Tensor> carry_tangents(int64_t s) const {
    std::vector<Tensor> out = carry_tan;
    for (size_t k = 0; k < nc; ++k)
      if (swap[k]) out[k] = phase[s % 2].out_tan[k];
    return out;
  }
};

}  // namespace

bool ScanRun::compiled_jvp(const std::vector<Tensor>& tangents, const Axes& batch,
                           const std::vector<std::pair<int64_t, int64_t>>& wanted, std::vector<Tensor>& out) {
  static const bool on = env_switch("TENAX_SCAN_TANGENT_PROGRAM");
  auto on_host = [](const std::vector<Tensor>& list) {
    return std::all_of(list.begin(), list.end(),
                       [](const Tensor& t) { return !t.defined() || t.device().kind == Device::Kind::cpu; });
  };
  if (!on || steps == 0 || !on_host(tangents) || !on_host(init) || !on_host(xs) || !on_host(params))
    return false;
  TangentSweep sweep(*this, tangents, batch, tangent_vars(*plan, tangents));
  for (int64_t s = 0; s < steps; ++s)
    if (!sweep.run_step(s, index(s), batch, over, steps, wanted)) return false;
  for (Phase& f : sweep.phase)
    for (auto& [j, c] : f.stores) c.flush();
  out = sweep.carry_tangents(steps - 1);
  out.insert(out.end(), sweep.ys_tan.begin(), sweep.ys_tan.end());
  return true;
}

}  // namespace tenax::detail
