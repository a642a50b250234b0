// Copy forwarding for replays of host programs that allow it (KernelProgram::allow_copy_forwarding):
// a copy into a temporary that only the program holds is dropped, and the calls after it read the
// copy's source instead, when that gives the same values.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tenax/core/ops/program_analysis.h"

namespace tenax::detail {

// A copy k of n contiguous elements from S into D qualifies when D's buffer is exactly those n
// elements and only this program holds it; nothing before k touches it; after k it is only read,
// by calls that can be redirected; and up to its last read nothing writes S's buffer (when S lies
// in a buffer the analysis does not know, nothing up to there may write outside the known ones).
// Then every read of D after k reads S at the same offset, and k is dropped.
void KernelProgram::forward_copies(PassState& st) const {
  const Extents& ext = st.ext;
  for (size_t k = 0; k < hot_.size(); ++k) {
    const InlineCall* cp = hot_[k].inl;
    if (!cp || cp->kind != ScalarLoop::Kind::copy || cp->outer != 1 || cp->so != 1 || cp->sa != 1 ||
        cp->n <= 0)
      continue;
    const auto* d = reinterpret_cast<const char*>(cp->o);
    const auto* s = reinterpret_cast<const char*>(cp->a);
    const int64_t bytes = cp->n * static_cast<int64_t>(sizeof(double));
    const int bd = ext.own_exactly(d, bytes);
    if (bd < 0) continue;
    const int bs = ext.find(s);
    if (bs == bd || (bs >= 0 && ext[bs].hi - s < bytes)) continue;
    const size_t last_read = last_redirectable_read(st, k, bd);
    // When S lies in a buffer the analysis does not know (-1), nothing up to the last read may
    // write outside the known ones.
    if (last_read == kNotForwardable || st.written_between(bs, k, last_read + 1)) continue;
    // Only the records listed under D's buffer read it (copied: relisting may grow the lists).
    const auto [from, to] = st.listed(bd, k + 1);
    const std::vector<uint32_t> readers(from, to);
    for (const uint32_t j : readers) {
      if (j > last_read) break;
      each_operand(hot_[j], [&](auto& p, bool, bool redirectable) {
        if (redirectable && p && ext.find(p) == bd) {
          const auto* q = s + (reinterpret_cast<const char*>(p) - d);
          p = static_cast<std::remove_reference_t<decltype(p)>>(static_cast<void*>(const_cast<char*>(q)));
        }
      });
      note_uses(st, j);
    }
    st.dropped[k] = 1;
    ++forwarded_;
  }
}

// The last record reading buffer bd after copy k, where nothing before k touches bd and every
// record after it only reads bd through redirectable operands; kNotForwardable otherwise.
size_t KernelProgram::last_redirectable_read(const PassState& st, size_t k, int bd) const {
  for (auto [it, end] = st.listed(bd, 0); it != end && *it < k; ++it)
    if (!st.dropped[*it] && st.in(*it, bd)) return kNotForwardable;
  size_t last_read = k;
  for (auto [it, end] = st.listed(bd, k + 1); it != end; ++it) {
    const size_t j = *it;
    const RecordUses& r = st.uses[j];
    for (int i = 0; i < r.n; ++i) {
      if (r.use[i].buffer != bd) continue;
      if (r.use[i].written || !r.use[i].redirectable) return kNotForwardable;
      last_read = j;
    }
  }
  return last_read;
}

}  // namespace tenax::detail
