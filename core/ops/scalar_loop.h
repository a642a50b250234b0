#pragma once
// Library-internal: the steps of a scan whose every kernel call works on ONE element, fused into a
// single loop of scalar instructions. A replayed step otherwise pays per call: a dispatch through
// its kernel program, a flat kernel's loop set-up and, per step, the calls of the slice copies.
// Here one call runs many steps: each instruction is an inline float64 form of a common kernel
// (copy, accumulate, add, mul, ...) or a call of a kernel's scalar twin (backends/kernels.h
// ScalarFn) on element pointers fixed at capture, except the slice copies', which move by a stride
// per step.
#include <cstdint>
#include <vector>

#include "tenax/backends/kernels.h"

namespace tenax::detail {

class ScalarLoop {
 public:
  enum class Kind : uint8_t {
    call,  ///< fn(p)
    // Inline float64 forms of the commonest kernels (the kernel's own arithmetic, same results):
    copy,     ///< *p0 = *p1
    acc,      ///< *p0 += *p1
    neg,      ///< *p0 = -*p1
    acc_neg,  ///< *p0 -= *p1
    add,      ///< *p0 = *p1 + *p2
    sub,      ///< *p0 = *p1 - *p2
    mul,      ///< *p0 = *p1 * *p2
    mul_acc,  ///< *p0 += *p1 * *p2
    // Set by push() for a moving operand:
    call_moving,
    copy_in,   ///< copy from a moving p1
    copy_out,  ///< copy into a moving p0
    acc_in,    ///< acc from a moving p1
    acc_out,   ///< acc into a moving p0
  };
  /// How a kernel runs in the loop: inline (kind, and which of the kernel's operands become
  /// p[0], p[1], p[2]) or, with Kind::call, through its scalar twin on all its operands.
  struct Form {
    Kind kind = Kind::call;
    int8_t arity = 0;
    int8_t operand[3] = {0, 1, 2};
  };
  struct Ins {
    ScalarFn fn = nullptr;  ///< for Kind::call
    Kind kind = Kind::call;
    int8_t arity = 0;       ///< operands: p[0] is written (and read by accumulating kernels)
    int8_t moving = -1;     ///< the operand whose pointer moves by `stride` bytes per step, or -1
    uint8_t from_last = 0;  ///< set by simplify(): operands (bits) the previous instruction produced
    bool relative = false;  ///< the moving operand indexes by step - run()'s `offset`, not by step
    void* p[5] = {};
    int64_t stride = 0;
  };

  /// Appends an instruction. With a moving operand, p[moving] is its address at step 0.
  void push(Ins ins);
  /// Declares an element whose value is read after the loop (a carry, a carry's cotangent, a
  /// parameter's adjoint). Every other element an instruction writes at a fixed address is the
  /// loop's own: a step's intermediate, written before it is read in every step, whose value
  /// after the loop nobody reads (callers rerun the step's programs before reading it again).
  void live_out(const void* p) { live_.push_back(p); }
  /// Removes copies between fixed elements by renaming (the copy's source written straight
  /// into its destination, or the destination's later uses reading the source) and instructions
  /// whose results nothing reads, which shortens the chain of dependent loads and stores a step
  /// makes. Results are unchanged: only which elements hold the loop's own intermediates.
  void simplify();
  /// Runs steps first, first + dir, ... (count of them): every instruction in order per step. A
  /// moving operand points at p[moving] + s * stride at step s, or (relative) + (s - offset) * stride.
  void run(int64_t first, int64_t count, int64_t dir, int64_t offset = 0) const;
  [[nodiscard]] size_t size() const { return code_.size(); }

 private:
  bool drop_dead();
  void link();
  bool merge_forward(size_t j);
  bool merge_backward(size_t j);
  [[nodiscard]] bool is_live(const void* p) const;
  std::vector<Ins> code_;
  std::vector<const void*> live_;
};

/// A call of n elements in an inline form (not Kind::call) with its operands resolved: what a
/// replayed kernel program runs for float64 kernels that have one (core/ops/capture.h), the
/// kernel's own arithmetic without its call and loop set-up. o is written; a and b are read (b is
/// a for the one-operand forms).
struct InlineCall {
  double* o = nullptr;
  const double* a = nullptr;
  const double* b = nullptr;
  int64_t so = 0, sa = 0, sb = 0, n = 0;
  ScalarLoop::Kind kind = ScalarLoop::Kind::call;
};

/// The InlineCall of one row of n elements of a call in form `f` on its flat arguments.
inline InlineCall resolve_form(const ScalarLoop::Form& f, const FlatArg* args, int64_t n) {
  const FlatArg& o = args[f.operand[0]];
  const FlatArg& a = args[f.operand[1]];
  const FlatArg& b = args[f.arity > 2 ? f.operand[2] : f.operand[1]];
  return {static_cast<double*>(o.data),
          static_cast<const double*>(a.data),
          static_cast<const double*>(b.data),
          o.stride,
          a.stride,
          b.stride,
          n,
          f.kind};
}

/// One row of an InlineCall: o[i] = f(o[i], a[i], b[i]). Rows of four or more with unit strides
/// (the common case) take four elements at a time, every load before any store, so the compiler
/// pairs them into vector instructions; that is exact for o equal to a or b too, and rows never
/// overlap otherwise.
template <class F>
inline void inline_row(const InlineCall& c, F f) {
  double* o = c.o;
  const double *a = c.a, *b = c.b;
  const int64_t n = c.n;
  if (n >= 4 && c.so == 1 && c.sa == 1 && c.sb == 1) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const double a0 = a[i], a1 = a[i + 1], a2 = a[i + 2], a3 = a[i + 3];
      const double b0 = b[i], b1 = b[i + 1], b2 = b[i + 2], b3 = b[i + 3];
      const double o0 = o[i], o1 = o[i + 1], o2 = o[i + 2], o3 = o[i + 3];
      const double r0 = f(o0, a0, b0), r1 = f(o1, a1, b1), r2 = f(o2, a2, b2), r3 = f(o3, a3, b3);
      o[i] = r0;
      o[i + 1] = r1;
      o[i + 2] = r2;
      o[i + 3] = r3;
    }
    for (; i < n; ++i) o[i] = f(o[i], a[i], b[i]);
    return;
  }
  const int64_t so = c.so, sa = c.sa, sb = c.sb;
  for (int64_t i = 0; i < n; ++i) o[i * so] = f(o[i * so], a[i * sa], b[i * sb]);
}

/// Runs an InlineCall. Inline: it sits in the replay loop.
inline void run_inline(const InlineCall& c) {
  using K = ScalarLoop::Kind;
  switch (c.kind) {
    case K::copy:
      inline_row(c, [](double, double x, double) { return x; });
      break;
    case K::acc:
      inline_row(c, [](double o, double x, double) { return o + x; });
      break;
    case K::neg:
      inline_row(c, [](double, double x, double) { return -x; });
      break;
    case K::acc_neg:
      inline_row(c, [](double o, double x, double) { return o - x; });
      break;
    case K::add:
      inline_row(c, [](double, double x, double y) { return x + y; });
      break;
    case K::sub:
      inline_row(c, [](double, double x, double y) { return x - y; });
      break;
    case K::mul:
      inline_row(c, [](double, double x, double y) { return x * y; });
      break;
    case K::mul_acc:
      inline_row(c, [](double o, double x, double y) { return o + x * y; });
      break;
    default:
      break;  // not an inline form (callers check)
  }
}

/// Whether scans fuse single-element steps into ScalarLoops (default on; TENAX_SCALAR_LOOPS=0 or
/// set_scalar_loops(false) turns it off, for comparison and debugging: steps then replay their
/// kernel programs one call at a time).
bool scalar_loops_enabled();
void set_scalar_loops(bool on);

}  // namespace tenax::detail
