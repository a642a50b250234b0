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
namespace {
constexpr auto kDouble = static_cast<int64_t>(sizeof(double));
int buffer_of(const Extents& ext, const void* p) { return p ? ext.find(p) : OperandUse::kNoBuffer; }
ContractPlan* mutable_plan(const ContractPlan* p) { return const_cast<ContractPlan*>(p); }
}  // namespace

void KernelProgram::fuse_contractions(PassState& st) const {
  for (size_t k = 0; k < hot_.size(); ++k) {
    if (st.dropped[k]) continue;
    if (hot_[k].inl) {
      fuse_copy_then_contraction(st, k);
    } else if (hot_[k].plan && !hot_[k].plan->base) {
      // A contraction T = x·y into a buffer of its own, then the one record that reads T.
      if (!fuse_contraction_then_copy(st, k)) fuse_contraction_then_add(st, k);
    }
  }
}

// Copy D = S (record k), then a contraction accumulating into D: the contraction reads S as its base.
bool KernelProgram::fuse_copy_then_contraction(PassState& st, size_t k) const {
  const Extents& ext = st.ext;
  const InlineCall* cp = hot_[k].inl;
  if (cp->kind != ScalarLoop::Kind::copy || cp->outer != 1 || cp->so != 1 || cp->sa != 1 || cp->n <= 0)
    return false;
  const int64_t bytes = cp->n * kDouble;
  const int bd = ext.own_exactly(cp->o, bytes);
  if (bd < 0) return false;
  const int bs = buffer_of(ext, cp->a);
  if (bs == bd || (bs >= 0 && ext[bs].hi - reinterpret_cast<const char*>(cp->a) < bytes)) return false;
  const size_t j = st.next_access(bd, k + 1);
  if (j == hot_.size() || !hot_[j].plan) return false;
  ContractPlan* p = mutable_plan(hot_[j].plan);
  if (p->base != p->z || p->sign != 1.0 || p->mn != cp->n || buffer_of(ext, p->z) != bd ||
      buffer_of(ext, p->x) == bd || buffer_of(ext, p->y) == bd || st.written_between(bs, k, j))
    return false;
  p->base = reinterpret_cast<const char*>(cp->a) + (static_cast<const char*>(p->z) - ext[bd].lo);
  note_uses(st, j);
  st.dropped[k] = 1;
  ++fused_;
  return true;
}

// The record that reads contraction k's own buffer T, when T is read by it alone; null otherwise.
const InlineCall* KernelProgram::sole_reader(PassState& st, size_t k, size_t& j) const {
  const Extents& ext = st.ext;
  const ContractPlan* p = hot_[k].plan;
  const int bt = ext.own_exactly(p->z, p->mn * kDouble);
  if (bt < 0 || buffer_of(ext, p->x) == bt || buffer_of(ext, p->y) == bt) return nullptr;
  j = st.next_access(bt, k + 1);
  if (j == hot_.size() || !hot_[j].inl || st.next_access(bt, j + 1) != hot_.size()) return nullptr;
  const InlineCall* c = hot_[j].inl;
  if (c->outer != 1 || c->n != p->mn || c->so != 1 || c->sa != 1) return nullptr;
  const int bo = buffer_of(ext, c->o);
  if (bo < 0 || bo == bt || buffer_of(ext, p->x) == bo || buffer_of(ext, p->y) == bo) return nullptr;
  return c;
}

// Contraction T = x·y (record k), then a copy D = T: the contraction writes D.
bool KernelProgram::fuse_contraction_then_copy(PassState& st, size_t k) const {
  size_t j = 0;
  const InlineCall* c = sole_reader(st, k, j);
  if (!c || c->kind != ScalarLoop::Kind::copy) return false;
  ContractPlan* p = mutable_plan(hot_[k].plan);
  const Extents& ext = st.ext;
  const int bo = buffer_of(ext, c->o);
  if (c->a != p->z || ext[bo].hi - reinterpret_cast<const char*>(c->o) < p->mn * kDouble ||
      st.next_access(bo, k + 1) != j)
    return true;  // a copy it cannot take: nothing else to try
  p->z = c->o;
  note_uses(st, k);
  st.dropped[j] = 1;
  ++fused_;
  return true;
}

// Contraction T = x·y (record k), then o = S + T, T + S or S - T (not T - S): the contraction runs
// in the add's place as o = S ± x·y.
bool KernelProgram::fuse_contraction_then_add(PassState& st, size_t k) const {
  size_t j = 0;
  const InlineCall* c = sole_reader(st, k, j);
  if (!c) return false;
  const bool add = c->kind == ScalarLoop::Kind::add, sub = c->kind == ScalarLoop::Kind::sub;
  if ((!add && !sub) || c->sb != 1) return false;
  const Hot h = hot_[k];
  ContractPlan* p = mutable_plan(h.plan);
  const Extents& ext = st.ext;
  const int bt = buffer_of(ext, p->z), bo = buffer_of(ext, c->o);
  const double* s = c->b == p->z ? c->a : add && c->a == p->z ? c->b : nullptr;
  if (!s || buffer_of(ext, s) == bt) return false;
  const int bs = buffer_of(ext, s);
  if (s != c->o && (bs == bo || (bs >= 0 && ext[bs].hi - reinterpret_cast<const char*>(s) < p->mn * kDouble)))
    return false;
  if (st.written_between(buffer_of(ext, p->x), k, j) || st.written_between(buffer_of(ext, p->y), k, j))
    return false;
  p->z = c->o;
  p->base = s;
  p->sign = sub ? -1.0 : 1.0;
  hot_[j] = h;  // the contraction, in the add's place
  note_uses(st, j);
  st.dropped[k] = 1;
  ++fused_;
  return true;
}

}  // namespace tenax::detail
