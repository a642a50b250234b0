// A host program's replay as threaded code: each record lowered to the address of its handler
// (an inline call of a fixed length: its kind and shape; a planned or flat call; any other record)
// and each handler jumping to the next one's, so that a replayed record costs its arithmetic and
// one indirect jump, not a loop's tests and a call through a function pointer. An inline call of
// one or four elements that reads what the call before it wrote takes those values from registers
// (the previous result), not through a store and a load.
#include <tuple>
#include <utility>
#include <vector>

#include "tenax/backends/cpu/avx2.h"
#include "tenax/core/ops/capture.h"

namespace tenax::detail {

#if defined(__GNUC__)

namespace {

// Whether the replay runs the AVX2 build's handlers (threaded_replay_avx2.cpp: four doubles per
// vector where the baseline's take two): where it exists and the CPU backend's AVX2 builds run.
bool avx2_handlers() {
#if defined(TENAX_HAVE_AVX2_KERNELS)
  return cpu::cpu_avx2();
#else
  return false;
#endif
}

using K = ScalarLoop::Kind;
using inline_detail::as_run;
using inline_detail::fixed;

// The inline calls with a handler of their own: fixed lengths 1 (any strides), and 2, 4, 8, 16
// contiguous or with b broadcast — the loops inline_run picks for them (compared by address, so
// that a handler computes exactly what the call's own loop would).
constexpr int kShapes = 9;
// The elements of a shape: 1 (shape 0), then 2, 4, 8, 16 contiguous, twice (b broadcast from 5 on).
constexpr int64_t shape_length(int shape) { return shape == 0 ? 1 : int64_t{2} << ((shape - 1) % 4); }
template <K k>
ReplayFn shape_run(int shape) {
  if (shape == 0) return as_run<fixed<k, 1, false>>;
  const int64_t n = shape_length(shape);
  return shape <= 4 ? inline_detail::fixed_for<k, false>(n) : inline_detail::fixed_for<k, true>(n);
}

constexpr K kKinds[] = {K::copy, K::acc, K::neg, K::acc_neg, K::add, K::sub, K::mul, K::mul_acc};
// code = (kind * kShapes + shape) * 8 + the operands (bits: o, a, b) that are the previous
// call's result, for shapes 0 and 2 (one element; four contiguous); then go, flat, record, a
// planned matrix call, end.
constexpr int kInline = 8 * kShapes * 8;
constexpr int kGo = kInline, kFlat = kInline + 1, kRecord = kInline + 2, kMat = kInline + 3, kEnd = kInline + 4;
// From how many records on a program's handlers look ahead (KernelProgram::kThreadedAhead): a
// shorter one's records and operands stay in L2, where the prefetches (~2.5 instructions per
// record) buy nothing (the compiled chain of 2 000 small ops: 49 instructions per op with them).
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

// A record as the lowering sees it: an inline call with a handler (kind >= 0: its kind index and
// shape), or anything else.
struct Lowering {
  size_t record = 0;  // its index in the program's records
  const InlineCall* c = nullptr;
  int kind = -1, shape = -1;
};

// The elements an inline call of `shape` touches through o (0), a (1) or b (2).
int64_t extent(int shape, int operand) { return operand == 2 && shape > 4 ? 1 : shape_length(shape); }
bool overlap(const double* p, int64_t n, const double* q, int64_t m) { return p < q + m && q < p + n; }

// Whether two inline calls may run in either order: neither writes an element the other touches.
bool commute(const Lowering& x, const Lowering& y) {
  auto into = [](const Lowering& w, const Lowering& r) {
    const int64_t n = extent(w.shape, 0);
    return overlap(w.c->o, n, r.c->o, extent(r.shape, 0)) || overlap(w.c->o, n, r.c->a, extent(r.shape, 1)) ||
           overlap(w.c->o, n, r.c->b, extent(r.shape, 2));
  };
  return x.kind >= 0 && y.kind >= 0 && !into(x, y) && !into(y, x);
}

// Which operands of `c` (bits: o, a, b) are the result `prev` keeps in registers.
unsigned last_mask(const Lowering& prev, const Lowering& c) {
  if (prev.kind < 0 || c.kind < 0 || !keeps_last(c.shape) || c.shape != prev.shape) return 0;
  const double* last = prev.c->o;
  return (reads_output(c.c->kind) && c.c->o == last ? 1u : 0u) | (c.c->a == last ? 2u : 0u) |
         (c.c->b == last ? 4u : 0u);
}

// Swaps two adjacent inline calls that commute where more calls then read the previous result. In
// a reverse program the calls that accumulate into one adjoint are often one call apart (the
// product y c: c̄ += ḡ, ȳ = ḡ c, c̄ += ḡ y): after the swap the second accumulation takes c̄ from
// registers, and the dependent chain through memory that bounds such a program's time is shorter.
// Each call computes what it did; only independent calls change places.
void bring_together(std::vector<Lowering>& l) {
  auto reads = [&l](size_t i, size_t j) { return j < l.size() && last_mask(l[i], l[j]) != 0 ? 1 : 0; };
  for (size_t k = 0; k + 2 < l.size(); ++k) {
    if (!commute(l[k + 1], l[k + 2])) continue;
    const int before = reads(k, k + 1) + reads(k + 2, k + 3);
    std::swap(l[k + 1], l[k + 2]);
    if (reads(k, k + 1) + reads(k + 1, k + 2) + reads(k + 2, k + 3) <= before) std::swap(l[k + 1], l[k + 2]);
  }
}

// The baseline's arithmetic for the handlers (threaded_handlers.inc): two doubles per vector, each
// lane computed as a double (the same bits as the scalar form).
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
struct Last4 {
  V2 l0, l1;
};
template <K k, unsigned M>
inline void four_last(double* o, const double* a, const double* b, Last4& l) {
  const V2 r0 =
      apply_form_as<k, V2>(M & 1u ? l.l0 : load2(o), M & 2u ? l.l0 : load2(a), M & 4u ? l.l0 : load2(b));
  const V2 r1 = apply_form_as<k, V2>(M & 1u ? l.l1 : load2(o + 2), M & 2u ? l.l1 : load2(a + 2),
                                     M & 4u ? l.l1 : load2(b + 2));
  store2(o, r0);
  store2(o + 2, r1);
  l.l0 = r0;
  l.l1 = r1;
}
template <K k, int N, bool B>
inline void shape_on(double* o, const double* a, const double* b) {
  inline_detail::fixed_on<k, N, B>(o, a, b);
}

}  // namespace

#define TENAX_RUN_THREADED run_threaded
#include "tenax/core/ops/threaded_handlers.inc"
#undef TENAX_RUN_THREADED

void KernelProgram::lower_threaded() const {
  static_assert(kEnd == kThreadedEnd, "the handler table's layout (threaded_handlers.inc)");
  constexpr int kAhead = kThreadedAhead;
  threaded_.clear();
  from_last_ = 0;
  // The baseline build's handlers, or the AVX2 build's (one table layout: threaded_handlers.inc),
  // each with the look-ahead or without it (the second table).
  static const bool wide = avx2_handlers();
  static const void* const* tables = [this] {
    const void* const* t = nullptr;
    if (wide)
      run_threaded_avx2(nullptr, nullptr, 0, 0, &t);
    else
      run_threaded(nullptr, nullptr, 0, 0, &t);
    return t;
  }();
  threaded_avx2_ = wide;
  const void* const* table = tables + (hot_.size() >= kAheadFrom ? 0 : kEnd + 1);
  threaded_.reserve(hot_.size() + kAhead + 1);
  std::vector<Lowering> order(hot_.size());
  for (size_t i = 0; i < hot_.size(); ++i) {
    Lowering& r = order[i];
    r.record = i;
    r.c = hot_[i].inl;
    if (r.c) std::tie(r.kind, r.shape) = inline_shape(*r.c, std::make_index_sequence<8>{});
  }
  bring_together(order);
  int last_shape = -1;           // the shape of the previous record, where it keeps its result
  const double* last = nullptr;  // and what it wrote
  for (const Lowering& r : order) {
    const Hot& h = hot_[r.record];
    Threaded t{};
    const int kind = r.kind, shape = r.shape;
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

#else

void KernelProgram::lower_threaded() const {
  threaded_.clear();
  from_last_ = 0;
}
void KernelProgram::run_threaded(const Threaded*, const char*, int64_t, int64_t, const void* const**) const {}

#endif

#if !defined(__GNUC__) || !defined(TENAX_HAVE_AVX2_KERNELS)
// Never called: lower_threaded sets threaded_avx2_ only where the AVX2 build exists.
void KernelProgram::run_threaded_avx2(const Threaded* op, const char* what, int64_t position, int64_t index,
                                      const void* const** table) const {
  run_threaded(op, what, position, index, table);
}
#endif

}  // namespace tenax::detail
