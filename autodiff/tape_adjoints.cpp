// The tape's adjoint store: a variable's adjoint allocated on first use (zeroed, or unwritten for
// a rule that writes it whole), a view's adjoint the same view of its parent's, and a value lent
// as an adjoint until another contribution needs a buffer of its own.
#include <memory>
#include <optional>

#include "tenax/autodiff/tape_impl.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {

// Slots once made stay made: clearing one drops its storage (TensorAccess::release), and the next
// sweep takes it as it is, undefined.
void AdjointStore::clear() {
  for (int32_t k = 0; k < used_; ++k) TensorAccess::release(slot(k));
  used_ = 0;
  index_.clear();
}

void AdjointStore::destroy() {
  clear();
  for (int32_t k = 0; k < made_; ++k) std::destroy_at(&slot(k));
  made_ = 0;
}

int32_t AdjointStore::new_slot() {
  if (used_ < made_) return used_++;
  if (made_ == static_cast<int32_t>(chunks_.size()) * kChunk) chunks_.push_back(std::make_unique<Room[]>(kChunk));
  Room& room = chunks_[size_t(made_ / kChunk)][size_t(made_ % kChunk)];
  std::construct_at(reinterpret_cast<Tensor*>(room.bytes));
  ++made_;
  return used_++;
}

const Tensor& AdjointStore::get(std::size_t v) const {
  static const Tensor none;
  return index_[v] >= 0 ? slot(index_[v]) : none;
}

Tensor& TapeImpl::adjoint(int32_t v) {
  unlane(v);
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (a.defined()) return owned(v);
  const VarInfo& info = a_.vars[static_cast<size_t>(v)];
  if (info.record >= 0) {
    const Record& r = a_.records[static_cast<size_t>(info.record)];
    const int32_t parent = r.op->view ? a_.inputs[static_cast<size_t>(r.first_input)] : -1;
    if (parent >= 0) {
      // The view's adjoint is the same view of the parent's adjoint: one buffer for the family.
      // The sweep's batch axes pass through the view as an enclosing nmap's mapped axes do (a
      // transpose's order, say, need not name them).
      Tensor pa = select_partial(r, parent) ? a_.adjoints[static_cast<size_t>(parent)] : adjoint(parent);
      const Tensor* parent_adjoint = &pa;
      std::optional<MappedScope> batch;
      if (batch_.rank() > 0) batch.emplace(batch_.names());
      Tensor view = r.op->forward(Inputs{&parent_adjoint, 1}, attrs_of(r));
      a_.adjoints[static_cast<size_t>(v)] = view;
      return a_.adjoints[static_cast<size_t>(v)];
    }
  }
  return own_adjoint(v, true);
}

Tensor& TapeImpl::own_adjoint(int32_t v, bool zeroed) {
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  a = new_adjoint(v, zeroed);
  ++adjoint_buffers_;
  adjoint_bytes_ += logical_bytes(a);
  return a;
}

Tensor& TapeImpl::owned(int32_t v) {
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (!a_.partial.empty()) make_whole(v);
  if (a_.lent[static_cast<size_t>(v)] != 0) {
    const Tensor value = a;
    a_.lent[static_cast<size_t>(v)] = 0;
    copy_into(own_adjoint(v, false), value);
  }
  return a;
}

bool TapeImpl::lend_adjoint(int32_t v, const Tensor& value) {
  unlane(v);
  if (a_.adjoints.defined(static_cast<size_t>(v))) return false;
  const VarInfo& info = a_.vars[static_cast<size_t>(v)];
  if (info.record >= 0 && a_.records[static_cast<size_t>(info.record)].op->view) return false;
  if (!value.defined() || value.dtype() != info.dtype || value.device() != info.device) return false;
  // Already in the variable's order (no batch axes) and recorded by no tape: the value itself
  // (what the transpose would return, a view of the same layout, without an op call).
  if (batch_.rank() == 0 && value.axes() == var_axes(v) && !is_tracked(value)) {
    a_.adjoints[static_cast<size_t>(v)] = value;
    a_.lent[static_cast<size_t>(v)] = 1;
    return true;
  }
  Axes want = var_axes(v);
  for (int i = 0; i < batch_.rank(); ++i) want.push_back(batch_[i]);
  if (value.rank() != want.rank() || !value.axes().same_set(want)) return false;
  a_.adjoints[static_cast<size_t>(v)] = transpose(value, want.names());
  a_.lent[static_cast<size_t>(v)] = 1;
  return true;
}

const Tensor& TapeImpl::cotangent_of(int32_t v) {
  unlane(v);
  const Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (!a.defined()) return adjoint(v);
  if (!a_.partial.empty()) make_whole(v);
  return a;
}

Tensor& TapeImpl::adjoint_to_write(int32_t v, bool& fresh) {
  fresh = false;
  unlane(v);
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (a.defined()) return owned(v);
  const VarInfo& info = a_.vars[static_cast<size_t>(v)];
  if (info.record >= 0 && a_.records[static_cast<size_t>(info.record)].op->view) return adjoint(v);
  fresh = true;
  return own_adjoint(v, false);
}

Tensor TapeImpl::new_adjoint(int32_t v, bool zeroed) const {
  const VarInfo& info = var(v);
  if (batch_.rank() == 0)  // the variable's own axes (no copy to extend)
    return zeroed ? zeros(var_axes(v), info.dtype, info.device) : empty(var_axes(v), info.dtype, info.device);
  Axes ax = var_axes(v);
  for (int i = 0; i < batch_.rank(); ++i) ax.push_back(batch_[i]);
  return zeroed ? zeros(ax, info.dtype, info.device) : empty(ax, info.dtype, info.device);
}

}  // namespace tenax::detail
