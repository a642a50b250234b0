// Copy forwarding for replays of host programs that allow it (KernelProgram::allow_copy_forwarding):
// a copy into a temporary that only the program holds is dropped, and the calls after it read the
// copy's source instead, when that gives the same values.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tenax/core/ops/capture.h"

namespace tenax::detail {
namespace {

// The extents of the buffers the analysis knows, sorted; `own`: only this program holds it.
struct Extent {
  const char* lo;
  const char* hi;
  bool own;
};

class Extents {
 public:
  void add(const StoragePtr& s, bool own) {
    if (!s || s->bytes() == 0) return;
    const auto* lo = static_cast<const char*>(s->data());
    all_.push_back({lo, lo + s->bytes(), own});
  }
  void sort() {
    std::sort(all_.begin(), all_.end(), [](const Extent& a, const Extent& b) { return a.lo < b.lo; });
  }
  void set_own(int i, bool own) { all_[static_cast<size_t>(i)].own = own; }
  /// Whether two extents overlap (a buffer carved from another): find() would then be ambiguous.
  [[nodiscard]] bool nested() const {
    for (size_t i = 1; i < all_.size(); ++i)
      if (all_[i].lo < all_[i - 1].hi) return true;
    return false;
  }
  /// The buffer holding p, or -1 when none the analysis knows does.
  [[nodiscard]] int find(const void* p) const {
    const auto* c = static_cast<const char*>(p);
    auto it = std::upper_bound(all_.begin(), all_.end(), c,
                               [](const char* v, const Extent& e) { return v < e.lo; });
    if (it == all_.begin()) return -1;
    --it;
    return c < it->hi ? static_cast<int>(it - all_.begin()) : -1;
  }
  [[nodiscard]] const Extent& operator[](int i) const { return all_[static_cast<size_t>(i)]; }

 private:
  std::vector<Extent> all_;
};

}  // namespace

// A record's operands as (pointer, written, redirectable): an inline call's output and inputs, a
// flat call's operand 0 (written) and the rest, a contraction's x, y and z (written); an `other`
// call's tensors count as written and cannot be redirected. The pass runs only when every call is
// one of these.
//
// A copy k of n contiguous elements from S into D qualifies when D's buffer is exactly those n
// elements and only this program holds it; nothing before k touches it; after k it is only read,
// by calls that can be redirected; and up to its last read nothing writes S's buffer (when S lies
// in a buffer the analysis does not know, nothing up to there may write outside the known ones).
// Then every read of D after k reads S at the same offset, and k is dropped.
void KernelProgram::forward_copies() const {
  for (const Call& c : calls_) {
    const bool other_known = c.other && !c.describe && c.touches >= 0;
    if (!c.flat && c.plan < 0 && !other_known) return;
  }
  Extents ext;
  for (const StoragePtr& b : buffers_) ext.add(b, b->use_count() == 1);
  if (neighbour_)
    for (const StoragePtr& b : neighbour_->buffers_) ext.add(b, false);
  ext.sort();
  if (ext.nested()) return;
  for (const void* p : owned_)
    if (const int b = ext.find(p); b >= 0) ext.set_own(b, true);
  for (const void* p : shared_)
    if (const int b = ext.find(p); b >= 0) ext.set_own(b, false);

  // The records get their own plans and flat arguments, which the pass may redirect.
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
  // f(pointer, written, redirectable) for each operand of record h; pointer is a reference that
  // the pass may rewrite when redirectable.
  auto operands = [&](Hot& h, auto&& f) {
    if (h.inl) {
      auto& in = inline_[static_cast<size_t>(h.inl - inline_.data())];
      f(in.o, true, false);
      f(in.a, false, true);
      f(in.b, false, true);
    } else if (h.flat) {
      auto* args = const_cast<FlatArg*>(h.args);
      for (int a = 0; a < calls_[h.call].arity; ++a) f(args[a].data, a == 0, a != 0);
    } else if (h.plan) {
      auto* plan = const_cast<ContractPlan*>(h.plan);
      f(plan->x, false, true);
      f(plan->y, false, true);
      f(plan->z, true, false);
    } else {
      const Call& c = calls_[h.call];
      for (int t = 0; t < c.touches; ++t) {
        const void* p = c.touch[t];
        f(p, true, false);
      }
    }
  };

  std::vector<char> dropped(hot_.size(), 0);
  const size_t n_hot = hot_.size();
  for (size_t k = 0; k < n_hot; ++k) {
    const InlineCall* cp = hot_[k].inl;
    if (!cp || cp->kind != ScalarLoop::Kind::copy || cp->so != 1 || cp->sa != 1 || cp->n <= 0) continue;
    const auto* d = reinterpret_cast<const char*>(cp->o);
    const auto* s = reinterpret_cast<const char*>(cp->a);
    const int64_t bytes = cp->n * static_cast<int64_t>(sizeof(double));
    const int bd = ext.find(d);
    if (bd < 0 || !ext[bd].own || ext[bd].lo != d || ext[bd].hi - d != bytes) continue;
    const int bs = ext.find(s);
    if (bs == bd || (bs >= 0 && ext[bs].hi - s < bytes)) continue;
    auto in_d = [&](const void* p) { return p && ext.find(p) == bd; };
    bool ok = true;
    for (size_t j = 0; j < k && ok; ++j) {
      if (dropped[j]) continue;
      operands(hot_[j], [&](auto& p, bool, bool) { ok = ok && !in_d(p); });
    }
    size_t last_read = k;
    for (size_t j = k + 1; j < n_hot && ok; ++j)
      operands(hot_[j], [&](auto& p, bool written, bool redirectable) {
        if (!in_d(p)) return;
        if (written || !redirectable) ok = false;
        last_read = j;
      });
    for (size_t j = k + 1; j <= last_read && ok; ++j)
      operands(hot_[j], [&](auto& p, bool written, bool) {
        if (!written || !p) return;
        const int b = ext.find(p);
        if (bs >= 0 ? b == bs : b < 0) ok = false;
      });
    if (!ok) continue;
    for (size_t j = k + 1; j <= last_read; ++j)
      operands(hot_[j], [&](auto& p, bool, bool redirectable) {
        if (redirectable && in_d(p)) {
          const auto* q = s + (reinterpret_cast<const char*>(p) - d);
          p = static_cast<std::remove_reference_t<decltype(p)>>(static_cast<void*>(const_cast<char*>(q)));
        }
      });
    dropped[k] = 1;
    ++forwarded_;
  }
  if (forwarded_ == 0) return;
  size_t w = 0;
  for (size_t k = 0; k < n_hot; ++k)
    if (!dropped[k]) hot_[w++] = hot_[k];
  hot_.resize(w);
}

}  // namespace tenax::detail
