// Contraction fusion for replays of host programs that allow it (KernelProgram::allow_copy_forwarding):
// a small contraction takes the copy, add or subtraction next to it into its own record, through
// its base operand (ContractPlan::base: z = base ± x·y), when that gives the same values.
#include <cstdint>
#include <vector>

#include "tenax/core/ops/program_analysis.h"

namespace tenax::detail {

// Three shapes, each saving one record (T below is a buffer that only this program holds and that
// is exactly the n elements in question; a contraction's z covers its n = M·N elements):
//  - copy D = S, then (first touching D) a contraction accumulating into D: the copy is dropped and
//    the contraction reads S as its base (D = S + x·y). S must not be written in between.
//  - contraction T = x·y, then a copy D = T, and T never touched again: the contraction writes D
//    (the copy is dropped). D must not be touched in between, nor hold x or y.
//  - contraction T = x·y, then o = S + T, o = T + S or o = S - T, and T never touched again: the
//    contraction runs in the add's place as o = S ± x·y (T is no longer written). x and y must not
//    be written in between, o must not hold x or y, and S is o itself or in another buffer.
// The results are the same to the bit: the sum of products is formed as before, then added once.
void KernelProgram::fuse_contractions(PassState& st) const {
  const Extents& ext = st.ext;
  const size_t n_hot = hot_.size();
  auto buffer = [&](const void* p) { return p ? ext.find(p) : OperandUse::kNoBuffer; };
  auto mutable_plan = [](const Hot& h) { return const_cast<ContractPlan*>(h.plan); };
  constexpr auto kDouble = static_cast<int64_t>(sizeof(double));

  for (size_t k = 0; k < n_hot; ++k) {
    if (st.dropped[k]) continue;
    const Hot& h = hot_[k];
    if (const InlineCall* cp = h.inl) {  // copy D = S, then a contraction accumulating into D
      if (cp->kind != ScalarLoop::Kind::copy || cp->outer != 1 || cp->so != 1 || cp->sa != 1 || cp->n <= 0)
        continue;
      const int64_t bytes = cp->n * kDouble;
      const int bd = ext.own_exactly(cp->o, bytes);
      if (bd < 0) continue;
      const int bs = buffer(cp->a);
      if (bs == bd || (bs >= 0 && ext[bs].hi - reinterpret_cast<const char*>(cp->a) < bytes)) continue;
      const size_t j = st.next_access(bd, k + 1);
      if (j == n_hot || !hot_[j].plan) continue;
      ContractPlan* p = mutable_plan(hot_[j]);
      if (p->base != p->z || p->sign != 1.0 || p->mn != cp->n || buffer(p->z) != bd || buffer(p->x) == bd ||
          buffer(p->y) == bd || st.written_between(bs, k, j))
        continue;
      p->base = reinterpret_cast<const char*>(cp->a) + (static_cast<const char*>(p->z) - ext[bd].lo);
      note_uses(st, j);
      st.dropped[k] = 1;
      ++fused_;
      continue;
    }
    if (!h.plan || h.plan->base) continue;
    // A contraction T = x·y into a buffer of its own, then the one record that reads T.
    ContractPlan* p = mutable_plan(h);
    const int64_t bytes = p->mn * kDouble;
    const int bt = ext.own_exactly(p->z, bytes);
    if (bt < 0 || buffer(p->x) == bt || buffer(p->y) == bt) continue;
    const size_t j = st.next_access(bt, k + 1);
    if (j == n_hot || !hot_[j].inl || st.next_access(bt, j + 1) != n_hot) continue;
    const InlineCall& c = *hot_[j].inl;
    if (c.outer != 1 || c.n != p->mn || c.so != 1 || c.sa != 1) continue;
    const int bo = buffer(c.o);
    if (bo < 0 || bo == bt || buffer(p->x) == bo || buffer(p->y) == bo) continue;
    if (c.kind == ScalarLoop::Kind::copy) {  // D = T: the contraction writes D
      if (c.a != p->z || ext[bo].hi - reinterpret_cast<const char*>(c.o) < bytes ||
          st.next_access(bo, k + 1) != j)
        continue;
      p->z = c.o;
      note_uses(st, k);
      st.dropped[j] = 1;
      ++fused_;
      continue;
    }
    const bool add = c.kind == ScalarLoop::Kind::add, sub = c.kind == ScalarLoop::Kind::sub;
    if ((!add && !sub) || c.sb != 1) continue;
    // o = S + T, T + S or S - T (not T - S).
    const double* s = c.b == p->z ? c.a : add && c.a == p->z ? c.b : nullptr;
    if (!s || buffer(s) == bt) continue;
    const int bs = buffer(s);
    if (s != c.o && (bs == bo || (bs >= 0 && ext[bs].hi - reinterpret_cast<const char*>(s) < bytes)))
      continue;
    if (st.written_between(buffer(p->x), k, j) || st.written_between(buffer(p->y), k, j)) continue;
    p->z = c.o;
    p->base = s;
    p->sign = sub ? -1.0 : 1.0;
    hot_[j] = h;  // the contraction, in the add's place
    note_uses(st, j);
    st.dropped[k] = 1;
    ++fused_;
  }
}

}  // namespace tenax::detail
