// Partial adjoints: the adjoint of a large tensor first reached through a select (the final state
// of a scan's stacked outputs, say) is allocated unwritten and zeroed only in the selected slices;
// anything else that reads or adds to it zeroes the rest first, and a custom node (scan) may take
// the range instead, reading only the slices in it.
#include <algorithm>
#include <cstring>
#include <optional>

#include "tenax/autodiff/tape_impl.h"
#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// Below this many bytes a whole adjoint is zeroed as before (the bookkeeping would cost more).
constexpr int64_t kPartialBytes = int64_t{1} << 16;

}  // namespace

const CotangentRange* TapeImpl::partial_range(int32_t v) const {
  for (const auto& [var, range] : a_.partial)
    if (var == v) return &range;
  return nullptr;
}

bool TapeImpl::select_partial(const Record& r, int32_t p) {
  if (std::strcmp(r.op->name, "select") != 0) return false;
  const Attrs& at = attrs_of(r);
  return reach_partial(p, at.axes[0], at.i[0]);
}

Name TapeImpl::axis_in_parent(const Record& r, Name axis) const {
  const bool rename = std::strcmp(r.op->name, "rename") == 0;
  if (!rename && std::strcmp(r.op->name, "transpose") != 0) return Name();
  if (!rename) return axis;
  const Attrs& at = attrs_of(r);
  for (int k = 0; k < at.axes2.size(); ++k)
    if (at.axes2[k] == axis) return at.axes[k];
  return axis;
}

// v's adjoint with slice i along `axis` zeroed and written nowhere else: v's own (a root) made
// partial or its range extended, or, for a rename or transpose of a variable that can be reached
// so, the same view of that one's. False (nothing changed) where that does not apply.
bool TapeImpl::reach_partial(int32_t v, Name axis, int64_t i) {
  const VarInfo& info = var(v);
  if (info.record < 0 || !a_.records[static_cast<size_t>(info.record)].op->view) return partial_root(v, axis, i);
  const Record& r = a_.records[static_cast<size_t>(info.record)];
  const Name up = axis_in_parent(r, axis);
  if (up.empty()) return false;
  const Attrs& at = attrs_of(r);
  const int32_t parent = a_.inputs[static_cast<size_t>(r.first_input)];
  if (!reach_partial(parent, up, i)) return false;
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (!a.defined()) {
    const Tensor* pa = &a_.adjoints[static_cast<size_t>(parent)];
    std::optional<MappedScope> batch;
    if (batch_.rank() > 0) batch.emplace(batch_.names());
    a = r.op->forward(Inputs{&pa, 1}, at);
  }
  return true;
}

// reach_partial for a variable that is not a view: a large adjoint not made yet is made partial;
// a partial one along the same axis has its range extended (the slices between zeroed).
bool TapeImpl::partial_root(int32_t v, Name axis, int64_t i) {
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (!a.defined()) {
    const Axes& ax = var_axes(v);
    const int64_t bytes = ax.numel() * batch_.numel() * static_cast<int64_t>(itemsize(var(v).dtype));
    if (bytes < kPartialBytes || !ax.contains(axis) || ax.size_of(axis, "select") < 2) return false;
    fill_zero(select(own_adjoint(v, false), axis, i));
    a_.partial.push_back({v, CotangentRange{axis, i, i + 1}});
    return true;
  }
  for (auto& [var, range] : a_.partial) {
    if (var != v) continue;
    if (range.axis != axis) return false;  // adjoint(v) makes it whole
    if (i < range.lo) fill_zero(slice(a, axis, i, range.lo));
    if (i >= range.hi) fill_zero(slice(a, axis, range.hi, i + 1));
    range.lo = std::min(range.lo, i);
    range.hi = std::max(range.hi, i + 1);
    return true;
  }
  return false;
}

void TapeImpl::make_whole(int32_t v) {
  for (size_t k = 0; k < a_.partial.size(); ++k) {
    if (a_.partial[k].first != v) continue;
    const CotangentRange r = a_.partial[k].second;
    a_.partial.erase(a_.partial.begin() + static_cast<std::ptrdiff_t>(k));
    const Tensor& a = a_.adjoints[static_cast<size_t>(v)];
    if (r.lo > 0) fill_zero(slice(a, r.axis, 0, r.lo));
    if (r.hi < a.size(r.axis)) fill_zero(slice(a, r.axis, r.hi));
    return;
  }
}

void TapeImpl::offer_ranges(const CustomEntry& c) {
  std::vector<CotangentRange> ranges(static_cast<size_t>(c.n_out));
  bool any = false;
  for (int32_t k = 0; k < c.n_out; ++k)
    if (const CotangentRange* r = partial_range(c.first_out + k)) {
      ranges[static_cast<size_t>(k)] = *r;
      any = true;
    }
  if (!any || (c.shard == 0 && c.node->accept_cotangent_ranges(ranges))) return;
  for (int32_t k = 0; k < c.n_out; ++k) make_whole(c.first_out + k);
}

}  // namespace tenax::detail
