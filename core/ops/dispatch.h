#pragma once
// Library-internal: applying an op (device check, forward, recording) and the helpers op
// definitions share (kernel lookup, loop arguments over named axes, output allocation).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tenax/backends/kernels.h"
#include "tenax/core/creation.h"
#include "tenax/core/ops/op.h"

namespace tenax::detail {

static_assert(kMaxLoopRank == kMaxRank);

/// Slices [lo, hi) along `axis` of an output's cotangent or tangent (hi < 0: all of it; lo == hi:
/// none). For CustomNode::vjp, where the cotangent can be nonzero (the rest is zero but its memory
/// unwritten); for CustomNode::jvp, the slices of the tangent that anything reads.
struct CotangentRange {
  Name axis;
  int64_t lo = 0, hi = -1;
  [[nodiscard]] bool whole() const { return hi < 0; }
  [[nodiscard]] bool empty() const { return hi >= 0 && hi <= lo; }
};

/// A node with several outputs recorded by a control-flow op (scan): its reverse rule sees the
/// cotangents of all outputs at once.
class CustomNode {
 public:
  virtual ~CustomNode() = default;
  /// Offers where the next vjp()'s cotangents can be nonzero (one range per output; the tape
  /// keeps the adjoint of a stacked output of which only a few slices were selected so). A node
  /// that accepts never reads a cotangent outside its range (it zeroes the rest itself where it
  /// must); one that refuses (the default) gets the cotangents zeroed whole.
  virtual bool accept_cotangent_ranges(const std::vector<CotangentRange>& ranges) {
    (void)ranges;
    return false;
  }
  [[nodiscard]] virtual const char* name() const = 0;
  /// cotangents[k]: of output k, undefined when zero. adjoints[i]: the adjoint of input i to
  /// accumulate into in place, undefined when input i needs no gradient.
  virtual void vjp(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints) = 0;
  /// Bytes the node keeps for its reverse pass (counted in the tape's residual bytes).
  [[nodiscard]] virtual int64_t residual_bytes() const = 0;
  /// Whether vjp() accepts cotangents (and adjoints) with batch axes beyond the outputs' own.
  [[nodiscard]] virtual bool batched_vjp() const { return false; }
  /// Offers which slices of the next jvp()'s output tangents are read (one range per output; empty
  /// where the output's tangent is not needed). A node that accepts may leave the rest of a
  /// tangent unwritten (or an unneeded one undefined); one that refuses (the default) writes all.
  virtual bool accept_tangent_ranges(const std::vector<CotangentRange>& ranges) {
    (void)ranges;
    return false;
  }
  /// Forward mode: from the inputs' tangents (undefined: zero; `batch` axes beyond the inputs'
  /// own), the outputs' tangents into `out` (one per output; undefined: zero). False when the node
  /// has no forward mode (the sweep then raises an AutodiffError naming it).
  virtual bool jvp(const std::vector<Tensor>& tangents, const Axes& batch, std::vector<Tensor>& out) {
    (void)tangents;
    (void)batch;
    (void)out;
    return false;
  }
};

/// The interface the tape implements; core calls it when an op has a tracked input.
class Recorder {
 public:
  virtual ~Recorder() = default;
  /// Appends the op call; sets `out`'s variable.
  virtual void record(const OpDef& op, Inputs inputs, const Attrs& attrs, Tensor& out) = 0;
  /// Appends a multi-output node; sets the outputs' variables.
  virtual void record_custom(std::shared_ptr<CustomNode> node, const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) = 0;
  /// Bytes of steps' intermediates the scans recorded here may still keep for the reverse pass
  /// (a tape's residual budget, shared by all its scans); a recorder without one: no limit.
  [[nodiscard]] virtual int64_t residual_room() const { return INT64_MAX; }
  /// A scan kept `bytes` of its steps' intermediates.
  virtual void take_residual_room(int64_t bytes) { (void)bytes; }
};

/// The recorder of this thread and the serial of its session (tapes are per thread). While a scan
/// body is traced, `trace` is set (every op with a tracked input is recorded, differentiable or
/// not) and `outer` holds the serial of the tape the scan itself records on, so tensors that tape
/// tracks (parameters the body closes over) count as tracked too.
struct RecordState {
  Recorder* recorder = nullptr;
  uint32_t serial = 0;
  uint32_t outer = 0;
  bool trace = false;
  /// While tracing: what is traced, for errors ("scan body", a compiled function's name).
  const char* traced = nullptr;
  /// While tracing: the tracer can run the function op by op instead, where it calls something
  /// that cannot be traced (a compiled function: see Untraceable).
  bool fallback = false;
};
inline thread_local RecordState g_record_state;

/// Thrown, while a tracer that can fall back traces (RecordState::fallback), by a call that cannot
/// be traced (a scan, map, custom_vjp or transfer inside the function); the tracer catches it and
/// runs the function op by op. Not an Error: a function's own handlers do not take it.
struct Untraceable {
  const char* what;
};

/// What a call that cannot be traced does while tracing: throws Untraceable{what} where the tracer
/// can fall back, else Error("[what] inside a <traced> " + `why`).
[[noreturn]] void refuse_in_trace(const char* what, const std::string& why);

/// Set while the tape's reverse or forward sweep runs the rules on this thread: every rule computes
/// on this rank's blocks (sharded tensors are treated as the plain local tensors they hold); the
/// sweep's only communication is the rules of the collective records themselves.
inline thread_local bool g_sweep_local = false;
class LocalSweep {
 public:
  LocalSweep() : previous_(g_sweep_local) { g_sweep_local = true; }
  ~LocalSweep() { g_sweep_local = previous_; }
  LocalSweep(const LocalSweep&) = delete;
  LocalSweep& operator=(const LocalSweep&) = delete;

 private:
  bool previous_;
};

/// Axes mapped by the enclosing nmap/map on this thread (empty outside one). Every op call checks
/// its attributes against them (named/batching.h).
inline thread_local AxisList g_mapped;

/// Maps `axes` for the guard's lifetime (nested scopes add to the outer ones; with `replace`, the
/// mapped axes are exactly `axes`: a worker thread taking the caller's, or none at all).
class MappedScope {
 public:
  enum Mode { add, replace };
  explicit MappedScope(const AxisList& axes, Mode mode = add);
  ~MappedScope();
  MappedScope(const MappedScope&) = delete;
  MappedScope& operator=(const MappedScope&) = delete;

 private:
  AxisList previous_;
};

/// True when `t` is a variable of the session now recording on this thread.
inline bool is_tracked(const Tensor& t) {
  if (t.var() < 0 || !g_record_state.recorder) return false;
  const uint32_t s = t.tape_serial();
  return s == g_record_state.serial || (s == g_record_state.outer && s != 0);
}

/// Live tapes by serial: the thread each one records on, so that a tensor tracked by another
/// thread's live tape is an error rather than a silent constant (or a race on that tape). A
/// fixed table indexed by serial: with more live tapes than slots, an older tape's entry may be
/// overwritten and its tensors go unchecked; a check never fires wrongly (serials are compared).
/// This thread's token (nonzero, unique per thread for the process's life).
uint32_t thread_token();
void register_live_tape(uint32_t serial);
void unregister_live_tape(uint32_t serial);
/// Throws AutodiffError when `t` is tracked by a live tape of another thread.
void check_tape_owner(const Tensor& t, const char* op, int input);
/// check_tape_owner for tensors a tape ever recorded and this thread's session does not track (a
/// constant costs two compares, a variable of this thread's tape no call).
inline void check_tape_thread(const Tensor& t, const char* op, int input) {
  if (t.tape_serial() != 0 && t.var() >= 0) [[unlikely]]  // (out of the constants' path)
    if (!is_tracked(t)) check_tape_owner(t, op, input);
}

/// Where this thread is inside a scan or map, for error messages ("scan step", 12); what = null
/// outside one. Replayed scan steps pass their position to KernelProgram::run instead.
struct LoopPosition {
  const char* what = nullptr;
  int64_t index = 0;
};
inline thread_local LoopPosition g_loop_position;
/// Sets g_loop_position for its lifetime.
class LoopPositionScope {
 public:
  LoopPositionScope(const char* what, int64_t index) : previous_(g_loop_position) {
    g_loop_position = {what, index};
  }
  ~LoopPositionScope() { g_loop_position = previous_; }
  LoopPositionScope(const LoopPositionScope&) = delete;
  LoopPositionScope& operator=(const LoopPositionScope&) = delete;

 private:
  LoopPosition previous_;
};

/// Where the ops now running come from, for errors raised later (in the backward pass): a model
/// node's JSON pointer while the model evaluator runs that node; null otherwise. The tape keeps it
/// per record; the string must outlive the tape (the model's parsed graph does).
inline thread_local const std::string* g_source = nullptr;
class SourceScope {
 public:
  explicit SourceScope(const std::string* source) : previous_(g_source) { g_source = source; }
  ~SourceScope() { g_source = previous_; }
  SourceScope(const SourceScope&) = delete;
  SourceScope& operator=(const SourceScope&) = delete;

 private:
  const std::string* previous_;
};

/// The finite checks (core/check_finite.h): whether they are on; the flat index of t's first NaN
/// or Inf (logical order) or -1; and the check that throws NumericError naming the op, the element,
/// `where` ("in the forward pass") and the loop position, and that a kernel capture repeats.
extern std::atomic<bool> g_check_finite;
inline bool check_finite_enabled() { return g_check_finite.load(std::memory_order_relaxed); }
int64_t first_non_finite(const Tensor& t);
void check_finite_value(const Tensor& t, const char* op, const std::string& where);

/// op.forward, with failures below the op (allocation, a missing backend, sizes past the limit)
/// naming the op.
Tensor forward_naming_op(const OpDef& op, Inputs inputs, const Attrs& attrs);
/// Runs `op` on the inputs and records it when recording and some differentiable input is tracked.
Tensor apply(const OpDef& op, Inputs inputs, const Attrs& attrs);

/// The pieces of apply, inline for op families whose public functions call their forward
/// directly (elementwise.cpp): the same checks, errors and recording.
/// The exception in flight from a forward, rethrown naming the op (forward_naming_op's rule).
[[noreturn, gnu::cold, gnu::noinline]] void rethrow_naming_op(const OpDef& op);
[[noreturn, gnu::cold, gnu::noinline]] void throw_arity(const OpDef& op, int n);
/// Input i is undefined, or on another device than input 0.
[[noreturn, gnu::cold, gnu::noinline]] void throw_bad_input(const OpDef& op, Inputs inputs, int i);
/// Records the call on this thread's tape when a differentiable input is tracked.
void record_call(const OpDef& op, Inputs inputs, const Attrs& attrs, Tensor& out);

/// apply's checks of the inputs — their number, each defined and on input 0's device, none
/// tracked by another thread's tape — and the sharding ids of the inputs, ORed.
[[gnu::always_inline]] inline uint16_t check_inputs(const OpDef& op, Inputs inputs) {
  const int n = inputs.n;
  if (op.arity >= 0 && n != op.arity) [[unlikely]]
    throw_arity(op, n);
  uint16_t sharded = 0;
  const Storage* first = n > 0 ? inputs[0].storage().get() : nullptr;
  for (int i = 0; i < n; ++i) {
    const Tensor& t = inputs[i];
    const Storage* s = t.storage().get();
    if (!s || (s != first && !(s->device() == first->device()))) [[unlikely]]
      throw_bad_input(op, inputs, i);
    check_tape_thread(t, op.name, i);
    sharded |= t.shard_id();
  }
  return sharded;
}

/// op.forward with its errors naming the op.
[[gnu::always_inline]] inline Tensor forward_named(const OpDef& op, Inputs inputs, const Attrs& attrs) {
  try {
    return op.forward(inputs, attrs);
  } catch (...) {
    rethrow_naming_op(op);
  }
}

/// After the forward: the finite check (set_check_finite) and the record.
[[gnu::always_inline]] inline void finish_forward(const OpDef& op, Inputs inputs, const Attrs& attrs, Tensor& out) {
  if (check_finite_enabled()) check_finite_value(out, op.name, "in the forward pass");
  if (g_record_state.recorder && (op.vjp || g_record_state.trace)) [[unlikely]]
    record_call(op, inputs, attrs, out);
}
/// Attributes of an op call that sets none.
inline const Attrs kNoAttrs{};
inline Tensor apply(const OpDef& op, const Tensor& a, const Attrs& attrs = kNoAttrs) {
  const Tensor* p[1] = {&a};
  return apply(op, Inputs{p, 1}, attrs);
}
inline Tensor apply(const OpDef& op, const Tensor& a, const Tensor& b, const Attrs& attrs = kNoAttrs) {
  const Tensor* p[2] = {&a, &b};
  return apply(op, Inputs{p, 2}, attrs);
}
inline Tensor apply(const OpDef& op, const Tensor& a, const Tensor& b, const Tensor& c, const Attrs& attrs = kNoAttrs) {
  const Tensor* p[3] = {&a, &b, &c};
  return apply(op, Inputs{p, 3}, attrs);
}
/// Applies `op` to a list of tensors (variadic ops).
Tensor apply(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs);

/// Kernels of `d`; throws DeviceError when the device's backend is absent.
const KernelTable& kernels(Device d);
/// Throws DeviceError "[op] cuda:N is not available (K CUDA devices visible...)" unless `d` is
/// the host or a visible CUDA device.
void require_device(Device d, const char* op);
/// Index of a real floating dtype in kernel tables (0 float64, 1 float32); throws DTypeError
/// otherwise (a complex dtype: "[op] is not defined for complex128").
int float_index(DType t, const char* op);
/// Index of a floating dtype, real or complex, in the four-entry kernel tables (0 float64,
/// 1 float32, 2 complex128, 3 complex64); throws DTypeError for integers and booleans.
int numeric_index(DType t, const char* op);
/// Index of any dtype in KernelTable::copy.
constexpr int copy_index(DType t) {
  switch (t) {
    case DType::f64: return 0;
    case DType::f32: return 1;
    case DType::i64: return 2;
    case DType::b8: return 3;
    case DType::c128: return 4;
    case DType::c64: return 5;
  }
  return 0;
}
/// Throws unless every tensor is defined, real floating, of one dtype and on one device.
void check_float_operands(const char* op, Inputs in);
/// The same for an op defined on complex numbers too: every tensor floating (real or complex), of
/// one dtype.
void check_numeric_operands(const char* op, Inputs in);
/// Throws when a kernel is missing for `op` on `d`.
template <class Fn>
Fn need(Fn fn, const char* op, Device d) {
  if (!fn) throw DeviceError(std::string("[") + op + "] no kernel for device " + d.str());
  return fn;
}

/// Loop dims of `axes`.
LoopDims loop_dims(const Axes& axes);
/// `t` laid over `loop` axes (zero strides where t lacks an axis).
LoopArg loop_arg(const Tensor& t, const Axes& loop);
/// Null argument (kernels read zeros).
inline LoopArg no_arg() { return {}; }

/// out += v, where v's axes include out's (summed over the rest).
void accumulate(const Tensor& out, const Tensor& v);
/// Adjoint of input i for a rule that next runs ONE kernel pass of `loop_numel` elements writing
/// into it. `assign` is set when the pass must write (dst = ...) instead of accumulating: the
/// adjoint is fresh and the pass covers each of its elements once (loop_numel == its numel). A
/// fresh adjoint the pass would reduce into is zero-filled first (assign stays false).
const Tensor& adjoint_for_pass(VjpContext& c, int i, int64_t loop_numel, bool& assign);
/// A rank-0 zero of t's dtype on t's device (the other branch of a where()).
inline Tensor zero_like(const Tensor& t) { return full(Axes{}, 0.0, t.dtype(), t.device()); }
/// Zeros with the axes of `like` plus `batch` (a JVP rule's stand-in for an absent tangent).
Tensor zeros_with_batch(const Axes& like, const Axes& batch, DType dtype, Device device);
/// The axes tangent `t` of a primal with axes `primal` adds beyond them (its batch axes).
Axes batch_axes_of(const Tensor& t, const Axes& primal);
/// Sets every element of t to zero through the fill kernel (so that a kernel capture replays it).
void fill_zero(const Tensor& t);
/// adjoint(i) += v (summed over v's extra axes); a fresh adjoint is written, not zeroed and added.
void add_to_adjoint(VjpContext& c, int i, const Tensor& v);
/// A new contiguous tensor with the same values and axis order.
Tensor copy_of(const Tensor& t);
/// select()'s view of x at index i of its dim d, without the op's dispatch and checks (d and i
/// in range): what select's forward returns, for library code that walks slices itself.
Tensor select_view(const Tensor& x, int d, int64_t i);
/// dst = src elementwise over dst's axes (src lacking one of them is broadcast along it); same dtype.
void copy_into(const Tensor& dst, const Tensor& src);
/// Offsets (in elements) of every index of `batch` axes into `t` (t may lack some: stride 0).
void batch_offsets(const Tensor& t, const Axes& batch, std::vector<int64_t>& out);
/// Whether those offsets are s * stride for the flat index s of `batch` (its axes of size > 1
/// collapse into one: one batch axis, or several laid out as one); sets `stride` when so.
bool batch_stride(const Tensor& t, const Axes& batch, int64_t& stride);
/// "{b=1, c=0}": the coordinates of flat index `b` (row-major) over `batch`, for error messages.
std::string batch_index(const Axes& batch, int64_t b);
/// The (row, col) attribute of a matrix op on a tensor over `of`, checked before the AxisList is
/// built so that one axis given twice is an AxisError naming `op` (AxisList's own check says only
/// "[axes]").
AxisList matrix_axes(Name row, Name col, const Axes& of, const char* op);

}  // namespace tenax::detail
