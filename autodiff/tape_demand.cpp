// Forward mode's demand: from the output back over the records, which variables' tangents the
// forward sweep needs and, for one read only through selects along one axis (through renames and
// transposes), which slices; a custom node (scan) is offered the slices of its outputs' tangents.
#include <algorithm>
#include <cstring>

#include "tenax/autodiff/tape_impl.h"

namespace tenax::detail {
namespace {

const CotangentRange kNone{Name(), 0, 0};
const CotangentRange kWhole{};

// What reading both a and b reads.
CotangentRange merged(const CotangentRange& a, const CotangentRange& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  if (a.whole() || b.whole() || a.axis != b.axis) return kWhole;
  return {a.axis, std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

}  // namespace

// What record r reads of its inputs' tangents when `mine` of its output's is read: a select one
// slice, a rename or transpose the same slices (under the parent's name), anything else all.
CotangentRange TapeImpl::input_demand(const Record& r, const CotangentRange& mine) const {
  if (std::strcmp(r.op->name, "select") == 0) {
    const Attrs& at = attrs_of(r);
    return {at.axes[0], at.i[0], at.i[0] + 1};
  }
  const Name up = axis_in_parent(r, mine.axis);
  if (up.empty()) return kWhole;
  return mine.whole() ? mine : CotangentRange{up, mine.lo, mine.hi};
}

std::vector<CotangentRange> TapeImpl::tangent_demand(int32_t out) const {
  std::vector<CotangentRange> d(a_.vars.size(), kNone);
  if (out < 0) return d;
  d[static_cast<size_t>(out)] = kWhole;
  for (size_t k = a_.records.size(); k-- > 0;) {
    const Record& r = a_.records[k];
    CotangentRange need = kWhole;
    if (r.op == &kCustomOp) {
      const CustomEntry& c = a_.customs[static_cast<size_t>(r.attrs)];
      bool any = false;
      for (int32_t j = 0; j < c.n_out; ++j) any = any || !d[static_cast<size_t>(c.first_out + j)].empty();
      if (!any) continue;
    } else {
      const CotangentRange& mine = d[static_cast<size_t>(r.out)];
      if (mine.empty() && !r.op->collective_vjp) continue;  // collectives run on every rank
      need = input_demand(r, mine.empty() ? kWhole : mine);
    }
    for (int i = 0; i < r.n_inputs; ++i) {
      const int32_t v = a_.inputs[static_cast<size_t>(r.first_input + i)];
      if (v >= 0) d[static_cast<size_t>(v)] = merged(d[static_cast<size_t>(v)], need);
    }
  }
  return d;
}

bool TapeImpl::needed(const Record& r, const std::vector<CotangentRange>& demand) const {
  if (r.op != &kCustomOp) return !demand[static_cast<size_t>(r.out)].empty() || r.op->collective_vjp;
  const CustomEntry& c = a_.customs[static_cast<size_t>(r.attrs)];
  for (int32_t j = 0; j < c.n_out; ++j)
    if (!demand[static_cast<size_t>(c.first_out + j)].empty()) return true;
  return false;
}

void TapeImpl::offer_tangent_ranges(const CustomEntry& c, const std::vector<CotangentRange>& demand) {
  if (c.shard != 0) return;
  const auto first = demand.begin() + c.first_out;
  (void)c.node->accept_tangent_ranges(std::vector<CotangentRange>(first, first + c.n_out));
}

}  // namespace tenax::detail
