// The run loop of a fused scalar loop: each instruction lowered to one code (its kind, which
// operand moves, which operands are the previous result, whether the moving operand is relative)
// and the address of that code's handler, which tests nothing and jumps to the next one's.
#include <cstring>

#include "tenax/core/ops/scalar_loop.h"

namespace tenax::detail {
namespace {

using Ins = ScalarLoop::Ins;
using Kind = ScalarLoop::Kind;

// code = row * 16 + 8 (relative moving operand) + the from_last bits of operands 0..2. Row r < 14
// is kind r (ScalarLoop::Kind) with its own moving operand (copy_in ... acc_out: 1, 0, 1, 0);
// rows 16..24 add, sub and mul with operand 0, 1 or 2 moving, rows 25 and 26 mul_acc with operand
// 1 or 2 moving; row 15 holds the end of a step (0xff).
constexpr int kRows = 27;
constexpr int kEnd = 0xff;
constexpr Kind kMovingKinds[] = {Kind::add, Kind::sub, Kind::mul};

constexpr int row_of(Kind k, int moving) {
  if (moving < 0 || k == Kind::copy_in || k == Kind::copy_out || k == Kind::acc_in || k == Kind::acc_out ||
      k == Kind::call_moving)
    return static_cast<int>(k);
  if (k == Kind::mul_acc) return 25 + moving - 1;
  for (int r = 0; r < 3; ++r)
    if (kMovingKinds[r] == k) return 16 + 3 * r + moving;
  return -1;
}
constexpr Kind kind_of(int code) {
  const int row = code / 16;
  return row < 16 ? static_cast<Kind>(row) : row >= 25 ? Kind::mul_acc : kMovingKinds[(row - 16) / 3];
}
constexpr int moving_of(int code) {
  const int row = code / 16;
  switch (static_cast<Kind>(row)) {
    case Kind::copy_in:
    case Kind::acc_in:
      return 1;
    case Kind::copy_out:
    case Kind::acc_out:
      return 0;
    default:
      return row < 16 ? -1 : row >= 25 ? row - 24 : (row - 16) % 3;
  }
}
constexpr bool relative_of(int code) { return (code & 8) != 0; }
constexpr unsigned last_of(int code) { return static_cast<unsigned>(code) & 7u; }

double* f64(void* p) { return static_cast<double*>(p); }

}  // namespace

ScalarLoop::Op ScalarLoop::lowered(const Ins& c, uint32_t index) {
  Op op;
  const int row = row_of(c.kind, c.moving);
  op.code = static_cast<uint16_t>(row * 16 + (c.moving >= 0 && c.relative ? 8 : 0) + (c.from_last & 7));
  op.ins = index;
  for (int a = 0; a < 3; ++a) op.p[a] = c.p[a];
  op.stride = c.stride;
  if (const void* const* h = handlers()) op.handler = h[op.code];
  return op;
}

ScalarLoop::Op ScalarLoop::end_of_step() {
  Op op;
  op.code = kEnd;
  if (const void* const* h = handlers()) op.handler = h[op.code];
  return op;
}

const void* const* ScalarLoop::handlers() {
  static const void* const* table = [] {
    const void* const* t = nullptr;
    ScalarLoop().run_loop(0, 0, 0, 0, &t);
    return t;
  }();
  return table;
}

void ScalarLoop::lower() {
  drop_jit();
  ops_.clear();
  for (size_t i = 0; i < code_.size(); ++i) ops_.push_back(lowered(code_[i], static_cast<uint32_t>(i)));
  ops_.push_back(end_of_step());
}

namespace {

// What an instruction of lowered code C, on elements p, computes and stores; returns the value it
// leaves as the previous result. s and sr: the step, and the step less run()'s offset (relative
// operands).
template <int C>
inline double execute(void* const* p, int64_t stride, double last, int64_t s, int64_t sr) {
  constexpr Kind k = kind_of(C);
  constexpr int mv = moving_of(C);
  constexpr unsigned fl = last_of(C);
  auto moved = [&](int a) { return f64(static_cast<char*>(p[a]) + (relative_of(C) ? sr : s) * stride); };
  auto in = [&](int a) {
    if (a == mv) return *moved(a);
    return (fl >> a) & 1u ? last : *static_cast<const double*>(p[a]);
  };
  auto put = [&](double v) { return *(mv == 0 ? moved(0) : f64(p[0])) = v; };
  if constexpr (k == Kind::copy || k == Kind::neg || k == Kind::copy_in || k == Kind::copy_out) {
    return put(apply_form<k>(0, in(1), 0));
  } else if constexpr (k == Kind::acc || k == Kind::acc_neg || k == Kind::acc_in || k == Kind::acc_out) {
    return put(apply_form<k>(in(0), in(1), 0));
  } else if constexpr (k == Kind::add || k == Kind::sub || k == Kind::mul) {
    return put(apply_form<k>(0, in(1), in(2)));
  } else if constexpr (k == Kind::mul_acc) {
    return put(apply_form<k>(in(0), in(1), in(2)));
  } else {
    return last;  // calls: run() handles them
  }
}

// A kernel's scalar twin on instruction c's elements, with its moving one (if any) at step s
// (relative: sr).
void call(const Ins& c, int64_t s, int64_t sr) {
  if (c.moving < 0) {
    c.fn(c.p);
    return;
  }
  void* q[5];
  std::memcpy(q, c.p, sizeof q);
  q[c.moving] = static_cast<char*>(c.p[c.moving]) + (c.relative ? sr : s) * c.stride;
  c.fn(q);
}

}  // namespace

// Each lowered code has a handler; with GNU C's labels as values (GCC, Clang) every handler
// dispatches the next instruction itself (one indirect jump per instruction, each predicted from
// its own site), elsewhere one switch does.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#define TENAX_LABEL(k, row, m) l_##k##_##m:
#define TENAX_NEXT goto*(++op)->handler
#else
#define TENAX_LABEL(k, row, m) case row * 16 + m:
#define TENAX_NEXT \
  ++op;            \
  continue
#endif

#define TENAX_HANDLER(k, row, m)                                \
  TENAX_LABEL(k, row, m)                                        \
  last = execute<row * 16 + m>(op->p, op->stride, last, s, sr); \
  TENAX_NEXT;
#define TENAX_CALL(k, row, m) \
  TENAX_LABEL(k, row, m)      \
  call(code[op->ins], s, sr); \
  TENAX_NEXT;
#define TENAX_END(k, row, m) \
  TENAX_LABEL(k, row, m)     \
  goto end_of_step;
#define TENAX_ROW(H, k, r)                                                                              \
  H(k, r, 0)                                                                                            \
  H(k, r, 1)                                                                                            \
  H(k, r, 2)                                                                                            \
  H(k, r, 3)                                                                                            \
  H(k, r, 4) H(k, r, 5) H(k, r, 6) H(k, r, 7) H(k, r, 8) H(k, r, 9) H(k, r, 10) H(k, r, 11) H(k, r, 12) \
      H(k, r, 13) H(k, r, 14) H(k, r, 15)
#define TENAX_ADDRESS(k, row, m) &&l_##k##_##m,
// Row by row as row_of numbers them.
#define TENAX_ROWS(H)                       \
  TENAX_ROW(TENAX_CALL_##H, call, 0)        \
  TENAX_ROW(H, copy, 1)                     \
  TENAX_ROW(H, acc, 2)                      \
  TENAX_ROW(H, neg, 3)                      \
  TENAX_ROW(H, acc_neg, 4)                  \
  TENAX_ROW(H, add, 5)                      \
  TENAX_ROW(H, sub, 6)                      \
  TENAX_ROW(H, mul, 7)                      \
  TENAX_ROW(H, mul_acc, 8)                  \
  TENAX_ROW(TENAX_CALL_##H, call_moving, 9) \
  TENAX_ROW(H, copy_in, 10)                 \
  TENAX_ROW(H, copy_out, 11)                \
  TENAX_ROW(H, acc_in, 12)                  \
  TENAX_ROW(H, acc_out, 13)                 \
  TENAX_ROW(TENAX_END_##H, unused, 14)      \
  TENAX_ROW(TENAX_END_##H, end, 15)         \
  TENAX_ROW(H, add_m0, 16)                  \
  TENAX_ROW(H, add_m1, 17)                  \
  TENAX_ROW(H, add_m2, 18)                  \
  TENAX_ROW(H, sub_m0, 19)                  \
  TENAX_ROW(H, sub_m1, 20)                  \
  TENAX_ROW(H, sub_m2, 21)                  \
  TENAX_ROW(H, mul_m0, 22)                  \
  TENAX_ROW(H, mul_m1, 23)                  \
  TENAX_ROW(H, mul_m2, 24)                  \
  TENAX_ROW(H, mul_acc_m1, 25)              \
  TENAX_ROW(H, mul_acc_m2, 26)
#define TENAX_CALL_TENAX_HANDLER TENAX_CALL
#define TENAX_END_TENAX_HANDLER TENAX_END
#define TENAX_CALL_TENAX_ADDRESS TENAX_ADDRESS
#define TENAX_END_TENAX_ADDRESS TENAX_ADDRESS

static_assert(static_cast<int>(Kind::copy) == 1 && static_cast<int>(Kind::mul_acc) == 8 &&
                  static_cast<int>(Kind::call_moving) == 9 && static_cast<int>(Kind::acc_out) == 13,
              "the handler rows follow ScalarLoop::Kind's order");
static_assert(row_of(Kind::add, 0) == 16 && row_of(Kind::mul, 2) == 24 && row_of(Kind::mul_acc, 2) == 26 &&
                  kind_of(21 * 16) == Kind::sub && moving_of(21 * 16) == 2 && moving_of(25 * 16) == 1 &&
                  moving_of(static_cast<int>(Kind::acc_out) * 16) == 0 && kEnd / 16 == 15,
              "the rows of the moving arithmetic forms");

void ScalarLoop::run(int64_t first, int64_t count, int64_t dir, int64_t offset) {
  if (count <= 0) return;
  if (!jit_ && !jit_tried_ && (steps_run_ += count) > kJitAfterSteps) compile_now();
  if (jit_) {
    run_jit(*jit_, code_.data(), first, first - offset, count, dir);
    return;
  }
  run_loop(first, count, dir, offset, nullptr);
}

bool ScalarLoop::compile_now() {
  if (!jit_ && !jit_tried_) {
    jit_tried_ = true;
    if (scalar_jit_enabled()) jit_ = build_jit(code_);
  }
  return jit_ != nullptr;
}

// With `handlers` set, hands out the handlers' table (for lower()) and runs nothing.
void ScalarLoop::run_loop(int64_t first, int64_t count, int64_t dir, int64_t offset,
                          const void* const** handlers) const {
  const Op* const begin = ops_.data();
  const Ins* const code = code_.data();
  const Op* op = begin;
  int64_t s = first, sr = first - offset, left = count;
  // The value the previous instruction produced: an operand marked from_last reads it instead of
  // loading the element just stored (which would put a store-to-load round trip on the chain).
  double last = 0;
#if defined(__GNUC__)
  static const void* const table[kRows * 16] = {TENAX_ROWS(TENAX_ADDRESS)};
  if (handlers) {
    *handlers = table;
    return;
  }
  goto*(op->handler);
  TENAX_ROWS(TENAX_HANDLER)
end_of_step:
  if (--left == 0) return;
  s += dir;
  sr += dir;
  op = begin;
  goto*(op->handler);
#else
  if (handlers) {
    *handlers = nullptr;
    return;
  }
  for (;;) {
    switch (op->code) {
      TENAX_ROWS(TENAX_HANDLER)
      default:
        break;
    }
  end_of_step:
    if (--left == 0) return;
    s += dir;
    sr += dir;
    op = begin;
  }
#endif
}

#undef TENAX_END_TENAX_ADDRESS
#undef TENAX_CALL_TENAX_ADDRESS
#undef TENAX_END_TENAX_HANDLER
#undef TENAX_CALL_TENAX_HANDLER
#undef TENAX_ROWS
#undef TENAX_ADDRESS
#undef TENAX_ROW
#undef TENAX_END
#undef TENAX_CALL
#undef TENAX_HANDLER
#undef TENAX_NEXT
#undef TENAX_LABEL
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace tenax::detail
