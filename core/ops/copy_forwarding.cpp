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
  const size_t n_hot = hot_.size();
  for (size_t k = 0; k < n_hot; ++k) {
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
    bool ok = true;
    for (size_t j = 0; j < k && ok; ++j) ok = st.dropped[j] || !st.in(j, bd);
    size_t last_read = k;
    for (size_t j = k + 1; j < n_hot && ok; ++j) {
      const RecordUses& r = st.uses[j];
      for (int i = 0; i < r.n; ++i) {
        if (r.use[i].buffer != bd) continue;
        if (r.use[i].written || !r.use[i].redirectable) ok = false;
        last_read = j;
      }
    }
    // When S lies in a buffer the analysis does not know (-1), nothing up to the last read may
    // write outside the known ones.
    ok = ok && !st.written_between(bs, k, last_read + 1);
    if (!ok) continue;
    for (size_t j = k + 1; j <= last_read; ++j) {
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

}  // namespace tenax::detail
