// Forward mode through a host scan, compiled: the first step's values and tangents are captured as
// kernel programs on fixed buffers (the carries, x_t and their tangents), which the other steps
// replay with no dispatch, as the reverse pass replays its step programs. ScanRun::jvp takes this
// path where the tangents cover their whole batch from the first step (the windowed forward
// Jacobian w.r.t. a sequence's inputs, whose batch range changes per step, runs op by op).
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
      if (!has[k] && r.var >= 0 && has[static_cast<size_t>(r.var)] && is_inexact(p.var(static_cast<int32_t>(k)).dtype)) {
        has[k] = 1;
        changed = true;
      }
    }
  }
  return has;
}

// dst[k] = src[k] for every defined pair, where a source may be (a view of) another destination:
// those are copied out first, so that no destination is overwritten before it is read.
void hand_on(const std::vector<Tensor>& dst, std::vector<Tensor> src) {
  std::vector<Tensor> bufs;
  for (const Tensor& d : dst)
    if (d.defined()) bufs.push_back(d);
  for (size_t k = 0; k < dst.size(); ++k)
    if (dst[k].defined() && src[k].defined() && src[k].data_ptr() != dst[k].data_ptr() && aliases(src[k], bufs))
      src[k] = copy_of(src[k]);
  for (size_t k = 0; k < dst.size(); ++k) {
    if (!dst[k].defined() || (src[k].defined() && src[k].data_ptr() == dst[k].data_ptr() && src[k].axes() == dst[k].axes()))
      continue;
    if (src[k].defined()) copy_into(dst[k], src[k]);
    else fill_zero(dst[k]);  // no tangent reached it this step
  }
}

// One compiled sweep: the plan's values and tangents on fixed buffers (the carries', the inputs'
// filled by slice copies per step), the step program (values, then tangents) and the hand-on
// program (new carries and their tangents into the carry buffers), captured at the first step.
struct TangentSweep {
  const ScanPlan& p;
  size_t nc, nx;
  std::vector<char> has;
  std::vector<Tensor> values, tan, carry, carry_tan, ys_tan;
  std::vector<SliceCopy> loads;                      // x_t and its tangent into their buffers
  std::vector<std::pair<size_t, SliceCopy>> stores;  // per output with a tangent: its store
  KernelProgram step, next;

  TangentSweep(const ScanRun& r, const std::vector<Tensor>& tangents, const Axes& batch, std::vector<char> vars)
      : p(*r.plan), nc(r.init.size()), nx(r.xs.size()), has(std::move(vars)), values(p.n_vars()),
        tan(p.n_vars()) {
    for (size_t k = 0; k < r.params.size(); ++k) {
      values[static_cast<size_t>(p.param_var(k))] = r.params[k];
      tan[static_cast<size_t>(p.param_var(k))] = tangents[nc + nx + k];
    }
    for (size_t k = 0; k < nc; ++k) {
      const PlanVar& v = p.var(static_cast<int32_t>(k));
      values[k] = empty(v.axes, v.dtype, r.init[k].device());
      copy_into(values[k], r.init[k]);
      if (!has[k]) continue;
      tan[k] = empty(with_batch(v.axes, batch), v.dtype, r.init[k].device());
      if (tangents[k].defined()) copy_into(tan[k], tangents[k]);
      else fill_zero(tan[k]);
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

  // The first step, captured; then the stacked outputs' tangents where one reaches an output and
  // some step of it is wanted.
  void capture_step(const Axes& batch, Name over, int64_t steps, const std::vector<std::pair<int64_t, int64_t>>& wanted) {
    LoopPositionScope where("scan step", 0);
    capture_into(step, [&] {
      p.forward(values);
      p.forward_tangent(values, tan, batch);
    });
    ys_tan.assign(p.y_out().size(), Tensor());
    for (size_t j = 0; j < ys_tan.size(); ++j) {
      const int32_t v = p.y_out()[j].var;
      if (v < 0 || !tan[static_cast<size_t>(v)].defined() || wanted[j].first >= wanted[j].second) continue;
      const Tensor& ty = tan[static_cast<size_t>(v)];
      Axes ax{{over, steps}};
      for (int i = 0; i < ty.rank(); ++i) ax.push_back(ty.axes()[i]);
      ys_tan[j] = empty(ax, ty.dtype(), ty.device());
      stores.emplace_back(j, SliceCopy(ty, ys_tan[j], over, false, false, true));
    }
  }

  void capture_next() {
    capture_into(next, [&] {
      std::vector<Tensor> v(nc), vt(nc);
      for (size_t k = 0; k < nc; ++k) {
        const int32_t r = p.carry_out()[k].var;
        v[k] = p.value(values, p.carry_out()[k]);
        if (r < 0) continue;
        vt[k] = tan[static_cast<size_t>(r)];
        if (vt[k].defined() && !has[k])
          throw AutodiffError("[jvp] internal: a scan carry's tangent appeared where none was expected");
      }
      hand_on(carry, v);
      hand_on(carry_tan, vt);
    });
  }
};

// The carries' tangents a compiled step copies into their buffers for the next step, at most: the
// op-by-op steps hand them on without a copy, and beyond a few tens of KiB the copy costs what the
// dispatch saves (the S5 layer's forward Jacobians: 64 KiB per step as fast either way; 512 KiB
// 12% more instructions compiled, the copy's).
constexpr int64_t kCopiedTangentLimit = 32 << 10;

}  // namespace

bool ScanRun::compiled_jvp(const std::vector<Tensor>& tangents, const Axes& batch,
                           const std::vector<std::pair<int64_t, int64_t>>& wanted, std::vector<Tensor>& out) {
  static const bool on = env_switch("TENAX_SCAN_TANGENT_PROGRAM");
  auto on_host = [](const std::vector<Tensor>& list) {
    return std::all_of(list.begin(), list.end(),
                       [](const Tensor& t) { return !t.defined() || t.device().kind == Device::Kind::cpu; });
  };
  if (!on || steps == 0 || !on_host(tangents) || !on_host(init) || !on_host(xs) || !on_host(params)) return false;
  const std::vector<char> has = tangent_vars(*plan, tangents);
  int64_t handed_on = 0;
  for (size_t k = 0; k < init.size(); ++k) {
    const PlanVar& v = plan->var(static_cast<int32_t>(k));
    if (has[k]) handed_on += v.axes.numel() * batch.numel() * static_cast<int64_t>(itemsize(v.dtype));
  }
  if (handed_on > kCopiedTangentLimit) return false;
  TangentSweep sweep(*this, tangents, batch, has);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = index(s);
    for (SliceCopy& c : sweep.loads) c.run(t);
    if (s == 0) sweep.capture_step(batch, over, steps, wanted);
    else sweep.step.run("scan step", s);
    for (auto& [j, c] : sweep.stores)
      if (t >= wanted[j].first && t < wanted[j].second) c.run(t);
    if (s == 0) sweep.capture_next();
    else sweep.next.run("scan step", s);
  }
  for (auto& [j, c] : sweep.stores) c.flush();
  out = sweep.carry_tan;  // undefined where no tangent can reach a carry
  out.insert(out.end(), sweep.ys_tan.begin(), sweep.ys_tan.end());
  return true;
}

}  // namespace tenax::detail
