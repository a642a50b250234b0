// Forward mode through a scan: the tangents of its final carries and stacked outputs from those of
// its init, xs and parameters, step by step (ScanRun::jvp): on the host compiled where it pays
// (autodiff/scan_tangent_program.cpp), otherwise op by op here. While the tangents entering the
// steps are zero outside a range of one batch axis that grows with the steps (a forward Jacobian
// w.r.t. a sequence's inputs: input s's basis vectors are zero before step s), each step runs on
// that range of the batch only (BatchWindow).
#include <algorithm>
#include <cstring>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/scan_run.h"
#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// Indices [lo, hi) along a step or batch axis.
struct Range {
  int64_t lo = 0, hi = 0;
  [[nodiscard]] bool has(int64_t i) const { return i >= lo && i < hi; }
  [[nodiscard]] bool empty() const { return hi <= lo; }
  [[nodiscard]] Range hull(Range o) const {
    if (empty()) return o;
    if (o.empty()) return *this;
    return {std::min(lo, o.lo), std::max(hi, o.hi)};
  }
};

// Whether `bytes` bytes at p are all zero: 256-byte blocks OR-ed whole (a loop the compiler
// vectorises), then the rest.
bool bytes_zero(const char* p, size_t bytes) {
  size_t k = 0;
  for (; k + 256 <= bytes; k += 256) {
    uint64_t w[32], any = 0;
    std::memcpy(w, p + k, 256);
    for (uint64_t v : w) any |= v;
    if (any != 0) return false;
  }
  for (; k < bytes; ++k)
    if (p[k] != 0) return false;
  return true;
}

// Host memory laid out as a tensor: sizes and byte strides, adjacent dims that run on as one
// merged.
struct Block {
  int rank = 0;
  int64_t size[kMaxRank], stride[kMaxRank];
  size_t item;

  // x's dims with dim d cut to m indices (dropped where m < 0).
  Block(const Tensor& x, int d, int64_t m) : item(itemsize(x.dtype())) {
    for (int i = 0; i < x.rank(); ++i) {
      const int64_t n = i == d ? m : x.axes().size(i), st = x.strides()[i] * static_cast<int64_t>(item);
      if (n < 0 || n == 1) continue;
      if (n == 0) {
        rank = -1;  // nothing to read
        return;
      }
      if (rank > 0 && stride[rank - 1] == n * st) {
        size[rank - 1] *= n;
        stride[rank - 1] = st;
        continue;
      }
      size[rank] = n;
      stride[rank++] = st;
    }
  }
  // Whether every byte of the elements from dim on is zero (-0.0 and NaN are not).
  [[nodiscard]] bool zero(const char* p, int dim = 0) const {
    if (rank < 0) return true;
    if (dim == rank) return bytes_zero(p, item);
    if (dim + 1 == rank && stride[dim] == static_cast<int64_t>(item))
      return bytes_zero(p, static_cast<size_t>(size[dim]) * item);
    for (int64_t i = 0; i < size[dim]; ++i)
      if (!zero(p + i * stride[dim], dim + 1)) return false;
    return true;
  }
};

// Indices [lo, hi) along axis b of x outside which x is zero (empty where x is). `hint` (the
// previous step's range, say): the spans below and above it are checked whole first, so that a
// range that moves by a few indices per step costs a pass over memory, not one per index.
Range nonzero_range(const Tensor& x, Name b, Range hint) {
  const int d = x.axes().index_of(b);
  const int64_t n = x.axes().size(d);
  const Block one(x, d, -1);
  const char* base = static_cast<const char*>(x.data_ptr());
  const int64_t step = x.strides()[d] * static_cast<int64_t>(one.item);
  auto zero_at = [&](int64_t i) { return one.zero(base + i * step); };
  auto zero_span = [&](int64_t a, int64_t e) { return a >= e || Block(x, d, e - a).zero(base + a * step); };
  int64_t lo = !hint.empty() && hint.lo <= n && zero_span(0, hint.lo) ? hint.lo : 0;
  while (lo < n && zero_at(lo)) ++lo;
  if (lo == n) return {};
  int64_t hi = std::max(lo + 1, std::min(hint.hi, n));
  if (hint.empty() || !zero_span(hi, n)) hi = n;
  while (hi > lo + 1 && zero_at(hi - 1)) --hi;
  return {lo, hi};
}

// Stores step t's tangent `ty` (undefined: zero) of a stacked output into `ys`, within the steps
// `r`: ys is made at the first step with a tangent, zeroed over the steps of r the scan passed
// before it (below t, or above it when `reverse`); the steps outside r stay unwritten. `ty` may
// cover only `window` of batch axis `b` (the rest of its slice is zero).
struct StackedTangent {
  Name over, b;
  int64_t steps, b_size;
  bool reverse;
  void store(Tensor& ys, const Tensor& ty, int64_t t, Range r, Range window) const {
    if (!r.has(t)) return;
    if (!ty.defined()) {
      if (ys.defined()) fill_zero(select(ys, over, t));
      return;
    }
    const bool part = window.lo > 0 || (ty.axes().contains(b) && ty.size(b) < b_size);
    if (!ys.defined()) {
      Axes ax{{over, steps}};
      for (int i = 0; i < ty.rank(); ++i) ax.push_back(part && ty.axes().name(i) == b ? Axis{b, b_size} : ty.axes()[i]);
      ys = empty(ax, ty.dtype(), ty.device());
      const int64_t lo = reverse ? std::max(t + 1, r.lo) : r.lo, hi = reverse ? r.hi : std::min(t, r.hi);
      if (lo < hi) fill_zero(slice(ys, over, lo, hi));
    }
    const Tensor slot = select(ys, over, t);
    if (!part) return copy_into(slot, ty);
    if (window.lo > 0) fill_zero(slice(slot, b, 0, window.lo));
    if (window.hi < b_size) fill_zero(slice(slot, b, window.hi));
    copy_into(slice(slot, b, window.lo, window.hi), ty);
  }
};

// The window on batch axis `axis` while it is open: the carries' tangents over the window
// `current` (`part`, undefined: zero), and over the whole axis (`full`, zero outside the windows so
// far; written when the window moves). Open for a host scan whose tangents have batch axes and
// enter through xs only (a parameter's or an initial carry's tangent would cover the whole batch
// from the first step). Windows are rounded out to sixteenths of the axis, so that a window
// growing by one index per step moves (a copy of the carries) once every size / 16 steps.
struct BatchWindow {
  bool open = false;
  Name axis;
  int64_t size = 0;
  Range current, fresh;
  std::vector<Tensor> part, full;
  // Per step output (the carries', then the stacked outputs'): the first that is the same variable.
  std::vector<size_t> first;

  BatchWindow(const ScanPlan& p, const std::vector<Tensor>& tangents, const Axes& batch) {
    const auto nc = static_cast<size_t>(p.n_carry()), nx = static_cast<size_t>(p.n_x());
    if (batch.rank() == 0) return;
    for (size_t k = 0; k < tangents.size(); ++k)
      if (tangents[k].defined() && (k < nc || k >= nc + nx || tangents[k].device().kind != Device::Kind::cpu)) return;
    open = true;
    part.resize(nc);
    full.resize(nc);
    std::vector<int32_t> vars;
    for (const auto* refs : {&p.carry_out(), &p.y_out()})
      for (const PlanRef& r : *refs) vars.push_back(r.var);
    for (size_t i = 0; i < vars.size(); ++i)
      first.push_back(static_cast<size_t>(std::find(vars.begin(), vars.end(), vars[i]) - vars.begin()));
  }

  // Step t's window: the hull of the current one and `fresh`, the xs tangents' nonzero range,
  // rounded. The first step with a nonzero tangent picks the batch axis along which that range is
  // narrowest; the window closes (open = false, `full` holding the carries) once it covers the
  // whole axis and `fresh` more than half of it (window_step would run once over everything).
  Range step(const std::vector<Tensor>& x_tan, const Axes& batch) {
    if (axis.empty() && !pick_axis(x_tan, batch)) return {};
    Range now;
    for (const Tensor& x : x_tan)
      if (x.defined()) now = now.hull(nonzero_range(x, axis, fresh.empty() ? current : fresh));
    fresh = now;
    Range r = current.hull(fresh);
    if (r.empty()) return r;
    const int64_t g = std::max<int64_t>(1, size / 16);
    r = {r.lo / g * g, std::min(size, (r.hi + g - 1) / g * g)};
    open = r.lo > 0 || r.hi < size || 2 * (fresh.hi - fresh.lo) <= size;  // else: as a whole from here
    if (!open || r.lo != current.lo || r.hi != current.hi) move_to(r);
    return open ? r : Range{};
  }

  bool pick_axis(const std::vector<Tensor>& x_tan, const Axes& batch) {
    double best = 1.0;
    for (int i = 0; i < batch.rank(); ++i) {
      Range r;
      for (const Tensor& x : x_tan)
        if (x.defined()) r = r.hull(nonzero_range(x, batch.name(i), {}));
      if (r.empty()) return false;  // every tangent zero at this step
      if (const double share = double(r.hi - r.lo) / double(batch.size(i)); share < best) {
        best = share;
        axis = batch.name(i);
        size = batch.size(i);
      }
    }
    open = !axis.empty();
    return open;
  }

  // The carries' tangents over the current window written into `full`; `part` then covers `r`.
  // A part that views another carry's `full` (a carry handed on as another: (x_t, x_{t-1})) is
  // copied out first, so that no part is overwritten before it is written.
  void move_to(Range r) {
    for (size_t k = 0; k < part.size(); ++k)
      for (size_t j = 0; j < full.size() && part[k].defined(); ++j)
        if (j != k && full[j].defined() && full[j].storage().get() == part[k].storage().get()) {
          part[k] = copy_of(part[k]);
          break;
        }
    for (size_t k = 0; k < part.size(); ++k) {
      Tensor& f = full[k];
      if (part[k].defined() && !f.defined()) {
        Axes ax = part[k].axes();
        ax.set_size(ax.index_of(axis), size);
        f = zeros(ax, part[k].dtype(), part[k].device());
      }
      if (!current.empty() && f.defined()) {
        const Tensor dst = slice(f, axis, current.lo, current.hi);
        if (!part[k].defined()) fill_zero(dst);
        else if (dst.data_ptr() != part[k].data_ptr()) copy_into(dst, part[k]);
      }
      part[k] = f.defined() ? slice(f, axis, r.lo, r.hi) : Tensor();
    }
    current = r;
  }
};

// The step's tangents of the carries, then of the stacked outputs, from `tan` after the program's
// tangents ran (undefined: zero); `tan` is cleared.
std::vector<Tensor> take_outputs(const ScanPlan& p, std::vector<Tensor>& tan) {
  std::vector<Tensor> out;
  for (const auto* refs : {&p.carry_out(), &p.y_out()})
    for (const PlanRef& r : *refs) out.push_back(r.var >= 0 ? tan[static_cast<size_t>(r.var)] : Tensor());
  std::fill(tan.begin(), tan.end(), Tensor());
  return out;
}

// One step on the window. Where the inputs' range `fresh` is at most half of it (a forward
// Jacobian w.r.t. a sequence's inputs: the basis vectors of step t's input), the program's tangents
// run twice, as tangents are linear in the tangents given: the carries' over the window, and the
// inputs' over `fresh` only, that result added into the first's there (in place where the first
// is a buffer of its own; an output that several refer to summed once). Otherwise once, both over
// the window.
std::vector<Tensor> window_step(const ScanPlan& p, const std::vector<Tensor>& values, std::vector<Tensor>& tan,
                                const BatchWindow& w, Range window, const std::vector<Tensor>& x_tan,
                                const Axes& batch) {
  auto batch_over = [&](Range r) {
    Axes b = batch;
    b.set_size(b.index_of(w.axis), r.hi - r.lo);
    return b;
  };
  const size_t nc = w.part.size();
  const bool split = 2 * (w.fresh.hi - w.fresh.lo) <= window.hi - window.lo;
  for (size_t k = 0; k < nc; ++k) tan[k] = w.part[k];
  for (size_t j = 0; j < x_tan.size() && !split; ++j)
    if (x_tan[j].defined()) tan[nc + j] = slice(x_tan[j], w.axis, window.lo, window.hi);
  p.forward_tangent(values, tan, batch_over(window));
  std::vector<Tensor> out = take_outputs(p, tan);
  if (!split || w.fresh.empty()) return out;
  for (size_t j = 0; j < x_tan.size(); ++j)
    if (x_tan[j].defined()) tan[nc + j] = slice(x_tan[j], w.axis, w.fresh.lo, w.fresh.hi);
  p.forward_tangent(values, tan, batch_over(w.fresh));
  const std::vector<Tensor> add = take_outputs(p, tan);
  const std::vector<size_t>& first = w.first;
  for (size_t i = 0; i < out.size(); ++i)
    if (first[i] < i) out[i] = Tensor();  // held once while summed
  for (size_t i = 0; i < out.size(); ++i) {
    if (first[i] < i) {
      out[i] = out[first[i]];
      continue;
    }
    if (!add[i].defined()) continue;
    Tensor& o = out[i];
    if (!o.defined()) {
      Axes ax = add[i].axes();
      ax.set_size(ax.index_of(w.axis), window.hi - window.lo);
      o = zeros(ax, add[i].dtype(), add[i].device());
    } else if (o.storage()->use_count() > 1) {
      o = copy_of(o);
    }
    accumulate(slice(o, w.axis, w.fresh.lo - window.lo, w.fresh.hi - window.lo), add[i]);
  }
  return out;
}

}  // namespace

// The steps of each stacked output whose tangents are read (accept_tangent_ranges), all by default.
std::vector<std::pair<int64_t, int64_t>> ScanRun::wanted_steps() {
  std::vector<std::pair<int64_t, int64_t>> wanted(plan->y_out().size(), {0, steps});
  const size_t nc = init.size();
  for (size_t j = 0; j < wanted.size() && nc + j < tangent_ranges_.size(); ++j) {
    const CotangentRange& r = tangent_ranges_[nc + j];
    if (r.empty()) wanted[j] = {0, 0};
    else if (!r.whole() && r.axis == over) wanted[j] = {r.lo, r.hi};
  }
  tangent_ranges_.clear();
  return wanted;
}

bool ScanRun::jvp(const std::vector<Tensor>& tangents, const Axes& batch, std::vector<Tensor>& out) {
  PauseRecording pause;
  const ScanPlan& p = *plan;
  const size_t nc = init.size(), nx = xs.size();
  std::vector<Tensor> values(p.n_vars()), tan(p.n_vars()), x_tan(nx);
  for (size_t k = 0; k < params.size(); ++k) values[static_cast<size_t>(p.param_var(k))] = params[k];
  std::vector<Tensor> carry = init, carry_tan(tangents.begin(), tangents.begin() + static_cast<std::ptrdiff_t>(nc));
  std::vector<Tensor> ys_tan(p.y_out().size());
  const std::vector<std::pair<int64_t, int64_t>> steps_wanted = wanted_steps();
  BatchWindow w(p, tangents, batch);
  if (!w.open && compiled_jvp(tangents, batch, steps_wanted, out)) return true;
  std::vector<Range> wanted;
  for (const auto& [lo, hi] : steps_wanted) wanted.push_back({lo, hi});
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = index(s);
    for (size_t j = 0; j < nx; ++j) {
      values[nc + j] = select(xs[j], over, t);
      x_tan[j] = tangents[nc + j].defined() ? select(tangents[nc + j], over, t) : Tensor();
    }
    for (size_t k = 0; k < nc; ++k) values[k] = carry[k];
    const bool was_open = w.open;
    const Range window = w.open ? w.step(x_tan, batch) : Range{};
    if (was_open && !w.open) carry_tan = w.full;  // the whole axis from here: step by step
    p.forward(values);
    std::vector<Tensor> step_out(nc + ys_tan.size());  // the carries' then the outputs' tangents
    if (!w.open) {
      for (size_t k = 0; k < params.size(); ++k) tan[static_cast<size_t>(p.param_var(k))] = tangents[nc + nx + k];
      for (size_t k = 0; k < nc; ++k) tan[k] = carry_tan[k];
      for (size_t j = 0; j < nx; ++j) tan[nc + j] = x_tan[j];
      p.forward_tangent(values, tan, batch);
      step_out = take_outputs(p, tan);
    } else if (!window.empty()) {
      step_out = window_step(p, values, tan, w, window, x_tan, batch);
    }
    for (size_t k = 0; k < nc; ++k) {
      carry[k] = p.value(values, p.carry_out()[k]);
      if (!w.open) carry_tan[k] = step_out[k];
      else if (!window.empty()) w.part[k] = step_out[k];
    }
    const StackedTangent st{over, w.axis, steps, w.size, opt.reverse};
    for (size_t j = 0; j < ys_tan.size(); ++j)
      st.store(ys_tan[j], step_out[nc + j], t, wanted[j], window);
  }
  if (w.open) w.move_to({});
  out = w.open ? w.full : carry_tan;  // undefined where zero
  out.insert(out.end(), ys_tan.begin(), ys_tan.end());
  return true;
}

bool ScanRun::accept_tangent_ranges(const std::vector<CotangentRange>& ranges) {
  tangent_ranges_ = ranges;
  return true;
}

}  // namespace tenax::detail
