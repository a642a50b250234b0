// A host program's replay as threaded code: each record lowered to the address of its handler
// (an inline call of a fixed length: its kind and shape; a planned or flat call; any other record)
// and each handler jumping to the next one's, so that a replayed record costs its arithmetic and
// one indirect jump, not a loop's tests and a call through a function pointer. An inline call of
// one or four elements that reads what the call before it wrote takes those values from registers
// (the previous result), not through a store and a load.
#include <utility>

#include "tenax/core/ops/capture.h"

namespace tenax::detail {

#if defined(__GNUC__)

namespace {

using K = ScalarLoop::Kind;
using inline_detail::as_run;
using inline_detail::fixed;

// The inline calls with a handler of their own: fixed lengths 1 (any strides), and 2, 4, 8, 16
// contiguous or with b broadcast — the loops inline_run picks for them (compared by address, so
// that a handler computes exactly what the call's own loop would).
constexpr int kShapes = 9;
template <K k>
ReplayFn shape_run(int shape) {
  if (shape == 0) return as_run<fixed<k, 1, false>>;
  const int64_t n = int64_t{2} << ((shape - 1) % 4);  // 2, 4, 8, 16
  return shape <= 4 ? inline_detail::fixed_for<k, false>(n) : inline_detail::fixed_for<k, true>(n);
}

constexpr K kKinds[] = {K::copy, K::acc, K::neg, K::acc_neg, K::add, K::sub, K::mul, K::mul_acc};
// code = (kind * kShapes + shape) * 8 + the operands (bits: o, a, b) that are the previous
// call's result, for shapes 0 and 2 (one element; four contiguous); then go, flat, record, a
// planned matrix call, end.
constexpr int kInline = 8 * kShapes * 8;
constexpr int kGo = kInline, kFlat = kInline + 1, kRecord = kInline + 2, kMat = kInline + 3, kEnd = kInline + 4;
// How many records ahead a handler asks for what that record reads first (Threaded's o and a: an
// inline call's output and first operand, a plan and its first operand, a flat call's arguments;
// for a flat call o is its kernel's address): a long program (a compiled function's unrolled
// loop) streams its records and plans from beyond L2, and the loads through their pointers are
// ones the hardware prefetcher cannot guess.
constexpr int kAhead = 8;
// From how many records on a program's handlers do that: a shorter one's records and operands stay
// in L2, where the prefetches (~2.5 instructions per record) buy nothing (the compiled chain of
// 2 000 small ops: 49 instructions per op with them).
constexpr size_t kAheadFrom = 8192;
constexpr bool keeps_last(int shape) { return shape == 0 || shape == 2; }

// The kind index and shape of inline call c, or -1 (its own run through `go`).
template <size_t... I>
std::pair<int, int> inline_shape(const InlineCall& c, std::index_sequence<I...>) {
  std::pair<int, int> found{-1, -1};
  auto try_kind = [&](auto kind_index) {
    constexpr size_t i = decltype(kind_index)::value;
    if (c.kind != kKinds[i]) return;
    for (int shape = 0; shape < kShapes; ++shape)
      if (c.run == shape_run<kKinds[i]>(shape)) found = {static_cast<int>(i), shape};
  };
  (try_kind(std::integral_constant<size_t, I>{}), ...);
  return found;
}

bool reads_output(K k) { return k == K::acc || k == K::acc_neg || k == K::mul_acc; }

// Two doubles, computed lane by lane as doubles (the same bits as the scalar form).
typedef double V2 __attribute__((vector_size(16)));
inline V2 load2(const double* p) {
  V2 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store2(double* p, V2 v) { __builtin_memcpy(p, &v, sizeof v); }

// An inline call of kind k on one element (M: which operands are `last`), keeping its result.
template <K k, unsigned M>
inline void one_last(double* o, const double* a, const double* b, double& last) {
  const double r = apply_form_as<k, double>(M & 1u ? last : *o, M & 2u ? last : *a, M & 4u ? last : *b);
  *o = r;
  last = r;
}
// On four contiguous elements, the previous result in two vectors.
template <K k, unsigned M>
inline void four_last(double* o, const double* a, const double* b, V2& l0, V2& l1) {
  const V2 r0 = apply_form_as<k, V2>(M & 1u ? l0 : load2(o), M & 2u ? l0 : load2(a), M & 4u ? l0 : load2(b));
  const V2 r1 = apply_form_as<k, V2>(M & 1u ? l1 : load2(o + 2), M & 2u ? l1 : load2(a + 2),
                                     M & 4u ? l1 : load2(b + 2));
  store2(o, r0);
  store2(o + 2, r1);
  l0 = r0;
  l1 = r1;
}

}  // namespace

void KernelProgram::lower_threaded() const {
  threaded_.clear();
  from_last_ = 0;
  static const void* const* tables = [this] {
    const void* const* t = nullptr;
    run_threaded(nullptr, 0, 0, &t);
    return t;
  }();
  // The handlers with the look-ahead, or without it (the second table).
  const void* const* table = tables + (hot_.size() >= kAheadFrom ? 0 : kEnd + 1);
  threaded_.reserve(hot_.size() + kAhead + 1);
  int last_shape = -1;           // the shape of the previous record, where it keeps its result
  const double* last = nullptr;  // and what it wrote
  for (const Hot& h : hot_) {
    Threaded t{};
    const auto [kind, shape] =
        h.inl ? inline_shape(*h.inl, std::make_index_sequence<8>{}) : std::pair{-1, -1};
    if (kind >= 0) {
      unsigned mask = 0;
      if (keeps_last(shape) && shape == last_shape) {
        mask |= reads_output(h.inl->kind) && h.inl->o == last ? 1u : 0u;
        mask |= h.inl->a == last ? 2u : 0u;
        mask |= h.inl->b == last ? 4u : 0u;
      }
      t.handler = table[(kind * kShapes + shape) * 8 + static_cast<int>(mask)];
      from_last_ += mask != 0;
      t.o = h.inl->o;
      t.a = h.inl->a;
      t.b = h.inl->b;
      last_shape = keeps_last(shape) ? shape : -1;
      last = t.o;
    } else if (h.go) {
      t.handler = table[kGo];
      t.go = h.go;
      // Read only by the look-ahead: the first operand the call reads.
      t.a = h.plan ? static_cast<const double*>(h.plan->x) : h.inl ? h.inl->a : nullptr;
      last_shape = -1;
    } else if (h.flat) {
      t.handler = table[kFlat];
      t.flat = h.flat;
      t.args = h.args;
      t.rows = static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(h.outer)) << 32 |
                                    static_cast<uint32_t>(h.count));
      last_shape = -1;
    } else if (h.mat) {
      t.handler = table[kMat];
      t.mat = h.mat;
      t.mat_hot = &h;
      last_shape = -1;
    } else {
      t.handler = table[kRecord];
      t.hot = &h;
      last_shape = -1;
    }
    threaded_.push_back(t);
  }
  Threaded end{};
  end.handler = table[kEnd];
  // The end, and past it what the handlers' look-ahead reads (kAhead records on).
  threaded_.insert(threaded_.end(), kAhead + 1, end);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"

// Each handler twice: P = a with the look-ahead, n without.
#define TENAX_NEXT_a                    \
  __builtin_prefetch((op + kAhead)->o); \
  __builtin_prefetch((op + kAhead)->a); \
  goto*(++op)->handler
#define TENAX_NEXT_n goto*(++op)->handler
#define TENAX_FORGET \
  last = 0, last0 = last1 = V2 { 0, 0 }
#define TENAX_SHAPE(P, k, s, N, B)                                                 \
  l##P##_##k##_##s##_0 : inline_detail::fixed_on<K::k, N, B>(op->o, op->a, op->b); \
  TENAX_NEXT_##P;
#define TENAX_ONE(P, k, m)                                           \
  l##P##_##k##_0_##m : one_last<K::k, m>(op->o, op->a, op->b, last); \
  TENAX_NEXT_##P;
#define TENAX_FOUR(P, k, m)                                                   \
  l##P##_##k##_2_##m : four_last<K::k, m>(op->o, op->a, op->b, last0, last1); \
  TENAX_NEXT_##P;
#define TENAX_MASKS(H, P, k) \
  H(P, k, 0) H(P, k, 1) H(P, k, 2) H(P, k, 3) H(P, k, 4) H(P, k, 5) H(P, k, 6) H(P, k, 7)
#define TENAX_KIND(P, k)                                                                  \
  TENAX_MASKS(TENAX_ONE, P, k)                                                            \
  TENAX_SHAPE(P, k, 1, 2, false)                                                          \
  TENAX_MASKS(TENAX_FOUR, P, k)                                                           \
  TENAX_SHAPE(P, k, 3, 8, false)                                                          \
  TENAX_SHAPE(P, k, 4, 16, false)                                                         \
  TENAX_SHAPE(P, k, 5, 2, true) TENAX_SHAPE(P, k, 6, 4, true) TENAX_SHAPE(P, k, 7, 8, true) \
  TENAX_SHAPE(P, k, 8, 16, true)
// Per kind and shape, 8 addresses (by the previous-result bits; shapes that keep no result repeat
// their one handler).
#define TENAX_EIGHT(P, k, s)                                                                   \
  &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_1, &&l##P##_##k##_##s##_2, &&l##P##_##k##_##s##_3, \
      &&l##P##_##k##_##s##_4, &&l##P##_##k##_##s##_5, &&l##P##_##k##_##s##_6, &&l##P##_##k##_##s##_7,
#define TENAX_SAME(P, k, s)                                                                    \
  &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_0, \
      &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_0, &&l##P##_##k##_##s##_0,
#define TENAX_ADDRESSES(P, k)                                                                 \
  TENAX_EIGHT(P, k, 0)                                                                        \
  TENAX_SAME(P, k, 1)                                                                         \
  TENAX_EIGHT(P, k, 2)                                                                        \
  TENAX_SAME(P, k, 3) TENAX_SAME(P, k, 4) TENAX_SAME(P, k, 5) TENAX_SAME(P, k, 6) TENAX_SAME(P, k, 7) \
  TENAX_SAME(P, k, 8)
#define TENAX_TABLE(P)                                                                                 \
  TENAX_ADDRESSES(P, copy) TENAX_ADDRESSES(P, acc) TENAX_ADDRESSES(P, neg) TENAX_ADDRESSES(P, acc_neg) \
  TENAX_ADDRESSES(P, add) TENAX_ADDRESSES(P, sub) TENAX_ADDRESSES(P, mul) TENAX_ADDRESSES(P, mul_acc)  \
  &&l##P##_go, &&l##P##_flat, &&l##P##_record, &&l##P##_mat, &&l_end,
// No call after the generic handlers reads the previous result (lower_threaded): clearing it after
// the call keeps the compiler from saving it around the call.
#define TENAX_GENERIC(P)                                                                                \
  l##P##_go : op->go->run(*op->go);                                                                     \
  TENAX_FORGET;                                                                                         \
  TENAX_NEXT_##P;                                                                                       \
  l##P##_flat : op->flat(static_cast<int64_t>(static_cast<uint64_t>(op->rows) >> 32), op->rows & 0xffffffff, \
                         op->args);                                                                     \
  TENAX_FORGET;                                                                                         \
  TENAX_NEXT_##P;                                                                                       \
  l##P##_record : run_record(*op->hot, what, position, index);                                          \
  TENAX_FORGET;                                                                                         \
  TENAX_NEXT_##P;                                                                                       \
  l##P##_mat : if (op->mat->run(*op->mat) >= 0) matrix_failed(*op->mat_hot, what, position);            \
  TENAX_FORGET;                                                                                         \
  TENAX_NEXT_##P;

// With `table` set, hands out the handlers' addresses (for lower_threaded: two tables of kEnd + 1,
// with the look-ahead and without) and runs nothing.
void KernelProgram::run_threaded(const char* what, int64_t position, int64_t index,
                                 const void* const** table) const {
  static const void* const handlers[2 * (kEnd + 1)] = {TENAX_TABLE(a) TENAX_TABLE(n)};
  if (table) {
    *table = handlers;
    return;
  }
  // The previous inline call's result (one element; four), for the calls that read it.
  double last = 0;
  V2 last0 = {0, 0}, last1 = {0, 0};
  const Threaded* op = threaded_.data();
  goto * op->handler;
  TENAX_KIND(a, copy)
  TENAX_KIND(a, acc)
  TENAX_KIND(a, neg)
  TENAX_KIND(a, acc_neg)
  TENAX_KIND(a, add)
  TENAX_KIND(a, sub)
  TENAX_KIND(a, mul)
  TENAX_KIND(a, mul_acc)
  TENAX_GENERIC(a)
  TENAX_KIND(n, copy)
  TENAX_KIND(n, acc)
  TENAX_KIND(n, neg)
  TENAX_KIND(n, acc_neg)
  TENAX_KIND(n, add)
  TENAX_KIND(n, sub)
  TENAX_KIND(n, mul)
  TENAX_KIND(n, mul_acc)
  TENAX_GENERIC(n)
l_end:
  return;
}

#undef TENAX_GENERIC
#undef TENAX_TABLE
#undef TENAX_ADDRESSES
#undef TENAX_SAME
#undef TENAX_EIGHT
#undef TENAX_KIND
#undef TENAX_MASKS
#undef TENAX_FOUR
#undef TENAX_ONE
#undef TENAX_SHAPE
#undef TENAX_FORGET
#undef TENAX_NEXT_n
#undef TENAX_NEXT_a
#pragma GCC diagnostic pop

#else

void KernelProgram::lower_threaded() const {
  threaded_.clear();
  from_last_ = 0;
}
void KernelProgram::run_threaded(const char*, int64_t, int64_t, const void* const**) const {}

#endif

}  // namespace tenax::detail
