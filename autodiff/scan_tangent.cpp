// Forward mode through a scan: the tangents of its final carries and stacked outputs from those of
// its init, xs and parameters, step by step (ScanRun::jvp). While the tangents entering the steps
// are zero outside a range of one batch axis that grows with the steps (a forward Jacobian w.r.t. a
// sequence's inputs: input s's basis vectors are zero before step s), each step runs on that range
// of the batch only (BatchWindow).
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

bool bytes_zero(const char* p, size_t bytes) {
  size_t k = 0;
  for (; k + 8 <= bytes; k += 8) {
    uint64_t w;
    std::memcpy(&w, p + k, 8);
    if (w != 0) return false;
  }
  for (; k < bytes; ++k)
    if (p[k] != 0) return false;
  return true;
}

// Whether every byte of the elements of host tensor x from dim on is zero (-0.0 and NaN are not).
bool all_zero(const char* p, const Tensor& x, int dim, size_t item) {
  if (dim == x.rank()) return bytes_zero(p, item);
  const int64_t n = x.axes().size(dim), st = x.strides()[dim] * static_cast<int64_t>(item);
  if (dim + 1 == x.rank() && st == static_cast<int64_t>(item)) return bytes_zero(p, static_cast<size_t>(n) * item);
  for (int64_t i = 0; i < n; ++i)
    if (!all_zero(p + i * st, x, dim + 1, item)) return false;
  return true;
}

// The hull of `known` and the indices along axis b of x outside which x is zero; only the indices
// outside `known` are read.
Range nonzero_range(const Tensor& x, Name b, Range known) {
  const int64_t n = x.size(b);
  auto zero_at = [&](int64_t i) {
    const Tensor s = select(x, b, i);
    return all_zero(static_cast<const char*>(s.data_ptr()), s, 0, itemsize(s.dtype()));
  };
  Range r = known;
  int64_t i = 0;
  for (const int64_t stop = known.empty() ? n : known.lo; i < stop && zero_at(i);) ++i;
  if (known.empty()) {
    if (i == n) return {};
    r = {i, i + 1};
  } else {
    r.lo = std::min(i, known.lo);
  }
  for (int64_t k = n; k-- > r.hi;)
    if (!zero_at(k)) {
      r.hi = k + 1;
      break;
    }
  return r;
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
  Range current;
  std::vector<Tensor> part, full;

  BatchWindow(const std::vector<Tensor>& tangents, size_t nc, size_t nx, const Axes& batch) {
    if (batch.rank() == 0) return;
    for (size_t k = 0; k < tangents.size(); ++k)
      if (tangents[k].defined() && (k < nc || k >= nc + nx || tangents[k].device().kind != Device::Kind::cpu)) return;
    open = true;
    part.resize(nc);
    full.resize(nc);
  }

  // Step t's window: the hull of the current one and the xs tangents' nonzero ranges, rounded.
  // The first step with a nonzero tangent picks the batch axis along which its range is narrowest;
  // the window closes (open = false, `full` holding the carries) once it covers the whole axis.
  Range step(const std::vector<Tensor>& x_tan, const Axes& batch) {
    if (axis.empty() && !pick_axis(x_tan, batch)) return {};
    Range r = current;
    for (const Tensor& x : x_tan)
      if (x.defined()) r = nonzero_range(x, axis, r);
    if (r.empty()) return r;
    const int64_t g = std::max<int64_t>(1, size / 16);
    r = {r.lo / g * g, std::min(size, (r.hi + g - 1) / g * g)};
    if (r.lo != current.lo || r.hi != current.hi) move_to(r);
    open = r.lo > 0 || r.hi < size;
    return open ? r : Range{};
  }

  bool pick_axis(const std::vector<Tensor>& x_tan, const Axes& batch) {
    double best = 1.0;
    for (int i = 0; i < batch.rank(); ++i) {
      Range r;
      for (const Tensor& x : x_tan)
        if (x.defined()) r = nonzero_range(x, batch.name(i), r);
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
  void move_to(Range r) {
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
  const auto wanted = wanted_steps();
  BatchWindow w(tangents, nc, nx, batch);
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
    std::fill(tan.begin(), tan.end(), Tensor());
    Axes step_batch = batch;
    if (!w.open) {
      for (size_t k = 0; k < params.size(); ++k) tan[static_cast<size_t>(p.param_var(k))] = tangents[nc + nx + k];
      for (size_t k = 0; k < nc; ++k) tan[k] = carry_tan[k];
      for (size_t j = 0; j < nx; ++j) tan[nc + j] = x_tan[j];
    } else if (!window.empty()) {
      step_batch.set_size(step_batch.index_of(w.axis), window.hi - window.lo);
      for (size_t k = 0; k < nc; ++k) tan[k] = w.part[k];
      for (size_t j = 0; j < nx; ++j)
        if (x_tan[j].defined()) tan[nc + j] = slice(x_tan[j], w.axis, window.lo, window.hi);
    }
    p.forward(values);
    if (!w.open || !window.empty()) p.forward_tangent(values, tan, step_batch);
    for (size_t k = 0; k < nc; ++k) {
      const PlanRef r = p.carry_out()[k];
      carry[k] = p.value(values, r);
      const Tensor ct = r.var >= 0 ? tan[static_cast<size_t>(r.var)] : Tensor();
      if (!w.open) carry_tan[k] = ct;
      else if (!window.empty()) w.part[k] = ct;
    }
    const StackedTangent st{over, w.axis, steps, w.size, opt.reverse};
    for (size_t j = 0; j < ys_tan.size(); ++j) {
      const PlanRef r = p.y_out()[j];
      st.store(ys_tan[j], r.var >= 0 ? tan[static_cast<size_t>(r.var)] : Tensor(), t,
               Range{wanted[j].first, wanted[j].second}, window);
    }
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
