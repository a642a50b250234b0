#pragma once
// Library-internal: what the planning passes of a host program's replay records know (copy
// forwarding, contraction fusion): the buffers by extent, and each record's operands.
#include <algorithm>
#include <vector>

#include "tenax/core/error.h"
#include "tenax/core/ops/capture.h"

namespace tenax::detail {

/// The extent of a buffer the analysis knows; `own`: only this program reads or writes it.
struct Extent {
  const char* lo;
  const char* hi;
  bool own;
};

/// The buffers a program's passes know: its own (captured) buffers, its neighbour's, sorted.
class Extents {
 public:
  void add(const StoragePtr& s, bool own) {
    if (!s || s->bytes() == 0) return;
    const auto* lo = static_cast<const char*>(s->data());
    all_.push_back({lo, lo + s->bytes(), own});
  }
  /// Sorts them, merging a buffer added twice (its own flag: both's).
  void sort() {
    std::sort(all_.begin(), all_.end(), [](const Extent& a, const Extent& b) { return a.lo < b.lo; });
    size_t w = 0;
    for (size_t i = 0; i < all_.size(); ++i) {
      if (w > 0 && all_[w - 1].lo == all_[i].lo && all_[w - 1].hi == all_[i].hi) {
        all_[w - 1].own = all_[w - 1].own && all_[i].own;
        continue;
      }
      all_[w++] = all_[i];
    }
    all_.resize(w);
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
  /// The buffer that is exactly `bytes` bytes from p and only this program's, or -1.
  [[nodiscard]] int own_exactly(const void* p, int64_t bytes) const {
    const int b = find(p);
    if (b < 0 || !(*this)[b].own || (*this)[b].lo != p || (*this)[b].hi - (*this)[b].lo != bytes) return -1;
    return b;
  }
  [[nodiscard]] const Extent& operator[](int i) const { return all_[static_cast<size_t>(i)]; }

 private:
  std::vector<Extent> all_;
};

/// One operand of a replay record: the buffer holding it (an Extents index; -1: a buffer the
/// analysis does not know; kNoBuffer: a null operand), and whether the record writes it and whether
/// a pass may point it elsewhere.
struct OperandUse {
  static constexpr int kNoBuffer = -2;
  int buffer = kNoBuffer;
  bool written = false, redirectable = false;
};
/// A record's operands (KernelProgram::each_operand: at most 10 — a flat kernel's arity, an
/// `other` call's touches (a fused tridiagonal reverse rule names 9) — so kMax leaves one spare).
struct RecordUses {
  static constexpr int kMax = 11;
  int n = 0;
  OperandUse use[kMax];
};

/// What the planning passes share: the known buffers, each record's operands by buffer (a pass
/// that rewrites a record's operands refreshes its entry: KernelProgram::note_uses), and the
/// records dropped so far. The scans below skip dropped records and visit, per buffer, only the
/// records listed under it, so that planning a long program (a compiled loop of 10^5 calls) is
/// not quadratic.
struct PassState {
  const Extents& ext;
  std::vector<RecordUses> uses;
  std::vector<char> dropped;
  /// Per buffer b, at b + 2 (so that -1, unknown, and kNoBuffer fit): the records that had an
  /// operand in it, ascending. A superset: a rewritten record stays listed under its old buffer
  /// (each visit checks the record's uses).
  std::vector<std::vector<uint32_t>> by_buffer;

  PassState(const Extents& e, size_t records) : ext(e), uses(records), dropped(records, 0) {}
  /// Lists record k under the buffers of its uses.
  void list(size_t k) {
    const RecordUses& r = uses[k];
    for (int i = 0; i < r.n; ++i) {
      const auto slot = static_cast<size_t>(r.use[i].buffer + 2);
      if (slot >= by_buffer.size()) by_buffer.resize(slot + 1);
      std::vector<uint32_t>& l = by_buffer[slot];
      const auto at = std::lower_bound(l.begin(), l.end(), static_cast<uint32_t>(k));
      if (at == l.end() || *at != k) l.insert(at, static_cast<uint32_t>(k));
    }
  }
  /// The records listed under buffer b, from record `from` on.
  [[nodiscard]] std::pair<const uint32_t*, const uint32_t*> listed(int b, size_t from) const {
    const auto slot = static_cast<size_t>(b + 2);
    if (slot >= by_buffer.size()) return {nullptr, nullptr};
    const std::vector<uint32_t>& l = by_buffer[slot];
    const auto at = std::lower_bound(l.begin(), l.end(), static_cast<uint32_t>(from));
    return {l.data() + (at - l.begin()), l.data() + l.size()};
  }

  [[nodiscard]] size_t size() const { return uses.size(); }
  /// Whether record j has an operand in buffer b (written only, with `writes`).
  [[nodiscard]] bool in(size_t j, int b, bool writes = false) const {
    const RecordUses& r = uses[j];
    for (int i = 0; i < r.n; ++i)
      if (r.use[i].buffer == b && (!writes || r.use[i].written)) return true;
    return false;
  }
  /// The first live record from `from` on with an operand in buffer b (size(): none).
  [[nodiscard]] size_t next_access(int b, size_t from) const {
    for (auto [it, end] = listed(b, from); it != end; ++it)
      if (!dropped[*it] && in(*it, b)) return *it;
    return size();
  }
  /// Whether a live record strictly between lo and hi writes buffer b (b = -1: any buffer the
  /// analysis does not know).
  [[nodiscard]] bool written_between(int b, size_t lo, size_t hi) const {
    for (auto [it, end] = listed(b, lo + 1); it != end && *it < hi; ++it)
      if (!dropped[*it] && in(*it, b, true)) return true;
    return false;
  }
};

// A record's operands as f(pointer, written, redirectable): an inline call's output and inputs, a
// flat call's operand 0 (written) and the rest, a contraction's x, y, its base when that is not z,
// and z (written); an `other` or matrix call's tensors count as written and cannot be redirected. `pointer`
// is a reference that a pass may rewrite when redirectable (the records' own copies: own_records).
template <class F>
void KernelProgram::each_operand(Hot& h, F&& f) const {
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
    if (plan->base && plan->base != plan->z) f(plan->base, false, true);
    f(plan->z, true, false);
  } else {
    const Call& c = calls_[h.call];
    for (int t = 0; t < c.touches; ++t) {
      const void* p = c.touch[t];
      f(p, true, false);
    }
  }
}

inline void KernelProgram::note_uses(PassState& st, size_t k) const {
  RecordUses& r = st.uses[k];
  r.n = 0;
  each_operand(hot_[k], [&](auto& p, bool written, bool redirectable) {
    if (r.n == RecordUses::kMax)
      throw Error("[replay planning] internal: a record has more operands than expected");
    r.use[r.n++] = {p ? st.ext.find(p) : OperandUse::kNoBuffer, written, redirectable};
  });
  st.list(k);
}

}  // namespace tenax::detail
