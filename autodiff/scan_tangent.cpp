// Forward mode through a scan: the tangents of its final carries and stacked outputs from those of
// its init, xs and parameters, step by step (ScanRun::jvp).
#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/scan_run.h"
#include "tenax/core/ops.h"

namespace tenax::detail {

bool ScanRun::jvp(const std::vector<Tensor>& tangents, const Axes& batch, std::vector<Tensor>& out) {
  PauseRecording pause;
  const ScanPlan& p = *plan;
  const size_t nc = init.size(), nx = xs.size();
  std::vector<Tensor> values(p.n_vars()), tan(p.n_vars());
  for (size_t k = 0; k < params.size(); ++k) values[static_cast<size_t>(p.param_var(k))] = params[k];
  std::vector<Tensor> carry = init, carry_tan(tangents.begin(), tangents.begin() + static_cast<std::ptrdiff_t>(nc));
  std::vector<Tensor> ys_tan(p.y_out().size());
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = index(s);
    std::fill(tan.begin(), tan.end(), Tensor());
    for (size_t k = 0; k < params.size(); ++k) tan[static_cast<size_t>(p.param_var(k))] = tangents[nc + nx + k];
    for (size_t k = 0; k < nc; ++k) {
      values[k] = carry[k];
      tan[k] = carry_tan[k];
    }
    for (size_t j = 0; j < nx; ++j) {
      values[nc + j] = select(xs[j], over, t);
      tan[nc + j] = tangents[nc + j].defined() ? select(tangents[nc + j], over, t) : Tensor();
    }
    p.forward(values);
    p.forward_tangent(values, tan, batch);
    for (size_t k = 0; k < nc; ++k) {
      const PlanRef r = p.carry_out()[k];
      carry[k] = p.value(values, r);
      carry_tan[k] = r.var >= 0 ? tan[static_cast<size_t>(r.var)] : Tensor();
    }
    for (size_t j = 0; j < ys_tan.size(); ++j) {
      const PlanRef r = p.y_out()[j];
      if (r.var < 0 || !tan[static_cast<size_t>(r.var)].defined()) {  // a zero tangent at this step
        if (ys_tan[j].defined()) fill_zero(select(ys_tan[j], over, t));
        continue;
      }
      const Tensor& ty = tan[static_cast<size_t>(r.var)];
      if (!ys_tan[j].defined()) {  // zero before the first step with a tangent; the rest is written
        Axes ax{{over, steps}};
        for (int i = 0; i < ty.rank(); ++i) ax.push_back(ty.axes()[i]);
        ys_tan[j] = empty(ax, ty.dtype(), ty.device());
        if (s > 0) fill_zero(opt.reverse ? slice(ys_tan[j], over, t + 1) : slice(ys_tan[j], over, 0, t));
      }
      copy_into(select(ys_tan[j], over, t), ty);
    }
  }
  out = carry_tan;  // undefined where zero
  out.insert(out.end(), ys_tan.begin(), ys_tan.end());
  return true;
}

}  // namespace tenax::detail
