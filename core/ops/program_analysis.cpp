// The planning passes of a host program that allows them (KernelProgram::allow_copy_forwarding):
// which buffers are known and whose, the records' own copies of what the passes rewrite, then copy
// forwarding and contraction fusion, and the records they drop.
#include "tenax/core/ops/program_analysis.h"

namespace tenax::detail {

void KernelProgram::plan_host_passes() const {
  // Every record's operands must be known (an `other` or matrix call naming the tensors it touches).
  for (const Call& c : calls_) {
    const bool other_known = (c.other || c.mat >= 0) && !c.describe && c.touches >= 0;
    if (!c.flat && c.plan < 0 && !other_known) return;
    if (c.moved()) return;  // its touches no longer say where it reads (read_in_place)
  }
  Extents ext;
  if (!known_extents(ext)) return;
  copy_rewritable_arguments();
  PassState st(ext, hot_.size());
  for (size_t k = 0; k < hot_.size(); ++k) note_uses(st, k);
  forward_copies(st);
  fuse_contractions(st);
  if (forwarded_ + fused_ == 0) return;
  size_t w = 0;
  for (size_t k = 0; k < hot_.size(); ++k)
    if (!st.dropped[k]) hot_[w++] = hot_[k];
  hot_.resize(w);
}

// The buffers the passes know: this program's (its own where only it holds them), the
// neighbour's and the shared ones, then the declared owned and shared pointers. False where two
// known buffers overlap (the passes then do nothing).
bool KernelProgram::known_extents(Extents& ext) const {
  for (const StoragePtr& b : buffers_) ext.add(b, b->use_count() == 1);
  if (neighbour_)
    for (const StoragePtr& b : neighbour_->buffers_) ext.add(b, false);
  for (const StoragePtr& b : shared_) ext.add(b, false);
  ext.sort();
  if (ext.nested()) return false;
  for (const void* p : owned_)
    if (const int b = ext.find(p); b >= 0) ext.set_own(b, true);
  for (const StoragePtr& s : shared_)
    if (const int b = s && s->bytes() > 0 ? ext.find(s->data()) : -1; b >= 0) ext.set_own(b, false);
  return true;
}

// The records get their own plans and flat arguments, which the passes may rewrite. Reserved to
// their upper bounds first: the records point into them.
void KernelProgram::copy_rewritable_arguments() const {
  hot_plans_.clear();
  hot_plans_.reserve(plans_.size());
  hot_args_.clear();
  hot_args_.reserve(flat_args_.size());
  for (Hot& h : hot_) {
    if (h.plan) {
      hot_plans_.push_back(*h.plan);
      h.plan = &hot_plans_.back();
    }
    if (h.flat) {
      const Call& c = calls_[h.call];
      const size_t at = hot_args_.size();
      hot_args_.insert(hot_args_.end(), h.args, h.args + c.arity);
      h.args = &hot_args_[at];
    }
  }
}

}  // namespace tenax::detail
