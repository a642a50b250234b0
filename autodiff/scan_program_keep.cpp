// What a reusable scan step program keeps between calls besides its kernel programs: the fused
// loops and slice copies a call built, filed without the call's tensors and handed to a later
// call whose tensors are laid out alike (scan_program.h, keep_loop / keep_copies).
#include "tenax/autodiff/scan_program.h"

#include <algorithm>

namespace tenax::detail {

void StepProgram::add_stacked(std::vector<Tensor>& out, bool backward) const {
  for (const SliceCopy& c : x_load_) out.push_back(c.whole());
  if (!backward) return;
  for (const SliceCopy& c : y_seed_) out.push_back(c.whole());
  for (const SliceCopy& c : x_adj_store_) out.push_back(c.whole());
}

namespace {

// The earlier of `stacked` that shares the storage of stacked[k], or -1.
int sharing(const std::vector<Tensor>& stacked, size_t k) {
  for (size_t j = 0; j < k; ++j)
    if (stacked[j].defined() && stacked[j].storage().get() == stacked[k].storage().get()) return static_cast<int>(j);
  return -1;
}

}  // namespace

void StepProgram::keep_loop(int role, const std::vector<Tensor>& stacked, std::unique_ptr<ScalarLoop> loop,
                            bool backward) {
  if (!reusable_ || !loop) return;
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const KeptLoop& k) { return k.role == role; });
  KeptLoop& kept = it != kept_.end() ? *it : kept_.emplace_back();
  kept.role = role;
  kept.backward = backward;
  kept.forward_gen = forward_gen_;
  kept.backward_gen = backward_gen_;
  kept.stacked.assign(stacked.size(), StackedLayout{});
  for (size_t k = 0; k < stacked.size(); ++k) {
    const Tensor& t = stacked[k];
    if (!t.defined()) continue;
    StackedLayout& l = kept.stacked[k];
    l.base = static_cast<const char*>(t.storage()->data());
    l.bytes = t.storage()->bytes();
    l.offset = t.offset();
    l.rank = t.rank();
    std::copy(t.strides(), t.strides() + t.rank(), l.strides);
    l.dtype = t.dtype();
    l.shares = sharing(stacked, k);
  }
  kept.loop = std::move(loop);
}

std::unique_ptr<ScalarLoop> StepProgram::take_loop(int role, const std::vector<Tensor>& stacked) {
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const KeptLoop& k) { return k.role == role; });
  if (it == kept_.end() || !it->loop) return nullptr;
  std::unique_ptr<ScalarLoop> loop = std::move(it->loop);
  const KeptLoop& kept = *it;
  if (kept.forward_gen != forward_gen_ || (kept.backward && kept.backward_gen != backward_gen_) ||
      kept.stacked.size() != stacked.size())
    return nullptr;
  moved_.clear();
  for (size_t k = 0; k < stacked.size(); ++k) {
    const StackedLayout& a = kept.stacked[k];
    const Tensor& t = stacked[k];
    if ((a.base == nullptr) != !t.defined()) return nullptr;
    if (!a.base) continue;
    if (a.bytes != t.storage()->bytes() || a.offset != t.offset() || a.rank != t.rank() ||
        a.dtype != t.dtype() || !std::equal(a.strides, a.strides + a.rank, t.strides()) ||
        a.shares != sharing(stacked, k))
      return nullptr;
    if (a.shares < 0) moved_.push_back({a.base, a.bytes, static_cast<char*>(t.storage()->data())});
  }
  if (!loop->rebase(moved_)) return nullptr;
  ++loops_reused_;
  return loop;
}

void StepProgram::keep_copies(int role, std::vector<SliceCopy> copies) {
  if (!reusable_ || role < 0) return;
  for (SliceCopy& c : copies) c.release();
  if (kept_copies_.size() <= static_cast<size_t>(role)) kept_copies_.resize(static_cast<size_t>(role) + 1);
  kept_copies_[static_cast<size_t>(role)] = std::move(copies);
}

std::vector<SliceCopy> StepProgram::take_copies(int role) {
  if (role < 0 || kept_copies_.size() <= static_cast<size_t>(role)) return {};
  return std::move(kept_copies_[static_cast<size_t>(role)]);
}

}  // namespace tenax::detail
