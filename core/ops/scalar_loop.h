#pragma once
// Library-internal: the steps of a scan whose every kernel call works on ONE element, fused into a
// single loop of scalar instructions. A replayed step otherwise pays per call: a dispatch through
// its kernel program, a flat kernel's loop set-up and, per step, the calls of the slice copies.
// Here one call runs many steps: each instruction is an inline float64 form of a common kernel
// (copy, accumulate, add, mul, ...) or a call of a kernel's scalar twin (backends/kernels.h
// ScalarFn) on element pointers fixed at capture, except the slice copies', which move by a stride
// per step.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tenax/backends/kernels.h"
#include "tenax/core/ops/elementwise_scalar.h"

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
    // Set by push() for a moving operand of copy and acc (add, sub, mul and mul_acc keep their
    // kind, with `moving` set: moves_inline):
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
  /// simplify() from the work done before: when `done` (a simplified loop) was pushed exactly as
  /// this one but for its moving operands' addresses (simplify() never looks at those), this
  /// takes `done`'s simplified instructions with this loop's addresses put in, and returns true;
  /// otherwise false, and nothing changed.
  bool simplify_as(const ScalarLoop& done);
  /// A stacked tensor's memory as a loop's moving operands point into it, [from, from + bytes), and
  /// where the same layout lies now.
  struct Moved {
    const char* from = nullptr;
    std::size_t bytes = 0;
    char* to = nullptr;
  };
  /// Points every moving operand (at its address at step 0) into its range's new place; false,
  /// and nothing changed, when one lies in none of `moved`. Fixed operands stay: a loop kept for
  /// a later call (StepProgram::keep_loop) reads the same fixed buffers then. A rebased loop no
  /// longer serves as simplify_as's `done`.
  bool rebase(const std::vector<Moved>& moved);
  /// Runs steps first, first + dir, ... (count of them): every instruction in order per step. A
  /// moving operand points at p[moving] + s * stride at step s, or (relative) + (s - offset) * stride.
  /// Once kJitAfterSteps steps have run, the loop runs as machine code where it can (compile_now);
  /// one thread at a time runs a loop (a scan's call holds it alone).
  void run(int64_t first, int64_t count, int64_t dir, int64_t offset = 0);
  /// Builds the loop's machine code now (scalar_loop_jit.cpp) instead of after kJitAfterSteps
  /// steps; whether the loop now runs as machine code (false: not x86-64 Linux, the system refused
  /// executable memory, or TENAX_SCALAR_JIT=0 / set_scalar_jit(false)).
  bool compile_now();
  /// Whether run() runs machine code.
  [[nodiscard]] bool compiled() const { return jit_ != nullptr; }
  /// Steps a loop runs through the lowered code before it is compiled (building the code costs
  /// about as much as that many interpreted steps: two system calls for its page).
  static constexpr int64_t kJitAfterSteps = 256;
  [[nodiscard]] size_t size() const { return code_.size(); }

 private:
  /// An instruction as run() executes it (scalar_loop_run.cpp): one code for the kind, which
  /// operand moves, which operands come from the previous result and whether the moving operand
  /// is relative, so that the run loop tests nothing per instruction; then its element pointers
  /// (a moving operand's at step 0) and the moving operand's stride.
  struct Op {
    const void* handler = nullptr;  ///< where run() executes `code` (with labels as values)
    uint16_t code = 0xff;           ///< 0xff: the end of a step
    uint32_t ins = 0;               ///< its instruction in code_ (calls take their operands from there)
    void* p[3] = {};
    int64_t stride = 0;
  };
  static Op lowered(const Ins& c, uint32_t index);
  static Op end_of_step();
  /// run()'s handler for each code, or null where run() dispatches by a switch.
  static const void* const* handlers();
  void run_loop(int64_t first, int64_t count, int64_t dir, int64_t offset,
                const void* const** handlers) const;
  void lower();
  bool drop_dead();
  bool fold_load(size_t i);
  bool fold_store(size_t j);
  bool fuse_mul_acc(size_t j);
  void link();
  bool merge_forward(size_t j);
  bool merge_backward(size_t j);
  [[nodiscard]] bool is_live(const void* p) const;
  /// The loop as machine code: built from code_ (fixed addresses and strides in the code, the
  /// moving operands' and calls' pointers read from code_ at run time, so rebase() keeps it).
  struct Jit;
  static std::shared_ptr<const Jit> build_jit(const std::vector<Ins>& code);
  static void run_jit(const Jit& jit, const Ins* code, int64_t s, int64_t sr, int64_t count, int64_t dir);
  /// Drops the machine code (code_ changed) and starts counting steps again.
  void drop_jit() {
    jit_.reset();
    jit_tried_ = false;
    steps_run_ = 0;
  }
  std::vector<Ins> code_;
  std::shared_ptr<const Jit> jit_;  ///< null until compiled; shared by copies (same code_)
  int64_t steps_run_ = 0;           ///< steps run since lowering, until compiled
  bool jit_tried_ = false;
  std::vector<Ins> pushed_;  ///< code_ as pushed, kept by simplify() (for simplify_as)
  std::vector<Op> ops_;      ///< code_ lowered, then an end-of-step op
  std::vector<const void*> live_;
};

/// Whether an instruction of kind k runs inline with operand `moving` moving (-1: none): copy and
/// acc in or out; add, sub and mul with any operand moving; mul_acc with a moving input. Other
/// kinds with a moving operand run as calls of their scalar twin (Kind::call_moving).
constexpr bool moves_inline(ScalarLoop::Kind k, int moving) {
  using K = ScalarLoop::Kind;
  if (moving < 0) return true;
  switch (k) {
    case K::copy:
    case K::acc:
      return moving <= 1;
    case K::add:
    case K::sub:
    case K::mul:
      return moving <= 2;
    case K::mul_acc:
      return moving == 1 || moving == 2;
    default:
      return false;
  }
}

/// Whether scans fuse single-element steps into ScalarLoops (default on; TENAX_SCALAR_LOOPS=0 or
/// set_scalar_loops(false) turns it off, for comparison and debugging: steps then replay their
/// kernel programs one call at a time).
bool scalar_loops_enabled();
void set_scalar_loops(bool on);

/// Whether fused loops are compiled to machine code after their first kJitAfterSteps steps
/// (default on where supported; TENAX_SCALAR_JIT=0 or set_scalar_jit(false) keeps them on the
/// lowered code's handlers, for comparison and debugging). Loops compiled before a change keep
/// their code.
bool scalar_jit_enabled();
void set_scalar_jit(bool on);
/// Fused loops compiled to machine code in this process so far (for tests and benchmarks).
int64_t scalar_jit_loops();

/// What inline form k writes to o from its operands x and y (and o's old value where it
/// accumulates): the ops' own expressions from elementwise.def (neg, add, sub, mul), so a replay
/// inline gives the kernel's bits. ScalarLoop::run and the planned inline calls (inline_call.h)
/// both compute through this; T is double or a vector of doubles (each lane computed as a double).
template <ScalarLoop::Kind k, class T>
inline T apply_form_as(T o, T x, T y) {
  namespace e = elementwise_scalar;
  using K = ScalarLoop::Kind;
  if constexpr (k == K::copy || k == K::copy_in || k == K::copy_out) return x;
  if constexpr (k == K::acc || k == K::acc_in || k == K::acc_out) return e::fwd_add(o, x);
  if constexpr (k == K::neg) return e::fwd_neg(x);
  if constexpr (k == K::acc_neg) return e::fwd_sub(o, x);
  if constexpr (k == K::add) return e::fwd_add(x, y);
  if constexpr (k == K::sub) return e::fwd_sub(x, y);
  if constexpr (k == K::mul) return e::fwd_mul(x, y);
  if constexpr (k == K::mul_acc) return e::fwd_add(o, e::fwd_mul(x, y));
  return T{};
}
template <ScalarLoop::Kind k>
inline double apply_form(double o, double x, double y) {
  return apply_form_as<k, double>(o, x, y);
}

}  // namespace tenax::detail
