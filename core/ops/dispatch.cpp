// Applying ops: device checks, the forward call, recording onto this thread's tape; shared helpers.
#include "tenax/core/ops/dispatch.h"

#include <array>
#include <atomic>
#include <string>
#include <string_view>

#include "tenax/core/env.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/collective.h"
#include "tenax/core/threads.h"
#include "tenax/named/batching.h"

namespace tenax::detail {
namespace {

KernelTable make_cpu_table() {
  KernelTable t;
  register_cpu_kernels(t);
  return t;
}
KernelTable make_cuda_table() {
  KernelTable t;
  register_cuda_kernels(t);
  return t;
}

}  // namespace

const KernelTable& kernels(Device d) {
  if (g_capture) [[unlikely]]
    return g_capture->table(d);
  if (d.kind == Device::Kind::cpu) {
    static const KernelTable cpu = [] {
      validate_environment();                 // an invalid variable is an Error at every op
      apply_thread_limit_from_environment();  // before the first parallel loop
      return make_cpu_table();
    }();
    return cpu;
  }
  static const int count = cuda_device_count();
  if (d.index < 0 || d.index >= count)
    throw DeviceError("[device] " + d.str() + " is not available (" + cuda_visibility() + ")");
  static const KernelTable cuda = make_cuda_table();
  return cuda;
}

void require_device(Device d, const char* op) {
  if (d.kind == Device::Kind::cpu) return;
  const int visible = cuda_device_count();
  if (d.index < 0 || d.index >= visible)
    throw DeviceError(std::string("[") + op + "] " + d.str() + " is not available (" + cuda_visibility() + ")");
}

Tensor apply(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<const Tensor*> p;
  p.reserve(inputs.size());
  for (const Tensor& t : inputs) p.push_back(&t);
  return apply(op, Inputs{p.data(), static_cast<int>(p.size())}, attrs);
}

namespace {
constexpr size_t kLiveSlots = 4096;
// (serial << 32) | thread token, 0 when free.
std::array<std::atomic<uint64_t>, kLiveSlots> g_live_tapes{};
std::atomic<uint32_t> g_next_token{0};
}  // namespace

uint32_t thread_token() {
  thread_local const uint32_t token = g_next_token.fetch_add(1, std::memory_order_relaxed) + 1;
  return token;
}

void register_live_tape(uint32_t serial) {
  g_live_tapes[serial % kLiveSlots].store((uint64_t{serial} << 32) | thread_token(),
                                          std::memory_order_release);
}

void unregister_live_tape(uint32_t serial) {
  uint64_t mine = (uint64_t{serial} << 32) | thread_token();
  g_live_tapes[serial % kLiveSlots].compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
}

void check_tape_owner(const Tensor& t, const char* op, int input) {
  const uint32_t s = t.tape_serial();
  if (s == 0 || t.var() < 0 || is_tracked(t)) return;
  const uint64_t e = g_live_tapes[s % kLiveSlots].load(std::memory_order_acquire);
  if (static_cast<uint32_t>(e >> 32) != s || static_cast<uint32_t>(e) == thread_token()) return;
  throw AutodiffError(std::string("[") + op + "] input " + std::to_string(input) +
                      " is tracked by a tape that is recording on another thread; tapes and the tensors "
                      "they track belong to one thread: record a tape in each task, and pass tasks plain "
                      "values (results of a finished tape, or copies)");
}

// The exception in flight from op.forward, rethrown naming the op: device failures below the op
// (allocation, a missing backend), sizes past kMaxElements (a ShapeError from Axes, "[axes] ..."),
// and the standard library's allocation failures as MemoryErrors. Others unchanged.
void rethrow_naming_op(const OpDef& op) {
  const auto tagged = [&op](const char* what) {
    const std::string tag = std::string("[") + op.name + "]";
    return std::string_view(what).substr(0, tag.size()) == tag ? std::string(what) : tag + " " + what;
  };
  try {
    throw;
  } catch (const DeviceError& e) {
    throw DeviceError(tagged(e.what()));
  } catch (const ShapeError& e) {
    if (std::string_view(e.what()).substr(0, 6) != "[axes]") throw;
    throw ShapeError(tagged(e.what()));
  } catch (const std::bad_alloc&) {
    throw MemoryError(tagged("the system could not provide the memory for the result or its scratch"));
  } catch (const std::length_error& e) {
    throw MemoryError(tagged((std::string("a buffer too large for the system: ") + e.what()).c_str()));
  }
}

Tensor forward_naming_op(const OpDef& op, Inputs inputs, const Attrs& attrs) {
  return forward_named(op, inputs, attrs);
}

void throw_arity(const OpDef& op, int n) {
  throw Error(std::string("[") + op.name + "] takes " + std::to_string(op.arity) + " inputs, got " +
              std::to_string(n));
}

void throw_bad_input(const OpDef& op, Inputs inputs, int i) {
  if (!inputs[i].defined())
    throw Error(std::string("[") + op.name + "] input " + std::to_string(i) + " is undefined");
  throw DeviceError(std::string("[") + op.name + "] input 0 is on " + inputs[0].device().str() + " but input " +
                    std::to_string(i) + " is on " + inputs[i].device().str() + "; move one with to(device)");
}

void record_call(const OpDef& op, Inputs inputs, const Attrs& attrs, Tensor& out) {
  const uint32_t skip = g_record_state.trace ? 0u : op.nondiff;
  for (int i = 0; i < inputs.n; ++i) {
    if (!(skip & (1u << i)) && is_tracked(inputs[i])) {
      g_record_state.recorder->record(op, inputs, attrs, out);
      return;
    }
  }
}

namespace {
// The forward and what follows it, with `out` the only thing returned (built in the caller's slot).
Tensor forward_and_finish(const OpDef& op, Inputs inputs, const Attrs& attrs) {
  Tensor out = forward_named(op, inputs, attrs);
  finish_forward(op, inputs, attrs, out);
  return out;
}
}  // namespace

Tensor apply(const OpDef& op, Inputs inputs, const Attrs& attrs) {
  const uint16_t sharded = check_inputs(op, inputs);
  if (!g_mapped.empty()) {
    check_unmapped(attrs.axes, g_mapped, op.name);
    check_unmapped(attrs.axes2, g_mapped, op.name);
    check_unmapped(attrs.shape.names(), g_mapped, op.name);
  }
  // Both branches return a prvalue: the one named result is built in place.
  if (sharded && !g_sweep_local) [[unlikely]]
    return apply_sharded(op, inputs, attrs);
  return forward_and_finish(op, inputs, attrs);
}

void refuse_in_trace(const char* what, const std::string& why) {
  if (g_record_state.fallback) throw Untraceable{what};
  throw Error(std::string("[") + what + "] inside a " + (g_record_state.traced ? g_record_state.traced : "traced function") +
              " " + why);
}

MappedScope::MappedScope(const AxisList& axes, Mode mode) : previous_(g_mapped) {
  if (mode == replace) g_mapped = AxisList{};
  for (Name n : axes)
    if (!g_mapped.contains(n)) g_mapped.push_back(n);
}
MappedScope::~MappedScope() { g_mapped = previous_; }

int float_index(DType t, const char* op) {
  if (t == DType::f64) return 0;
  if (t == DType::f32) return 1;
  if (is_complex(t))
    throw DTypeError(std::string("[") + op + "] is not defined for " + dtype_name(t) +
                     " (complex numbers: see docs/complex.md for the ops that take them)");
  throw DTypeError(std::string("[") + op + "] needs float64 or float32, got " + dtype_name(t));
}

int numeric_index(DType t, const char* op) {
  switch (t) {
    case DType::f64: return 0;
    case DType::f32: return 1;
    case DType::c128: return 2;
    case DType::c64: return 3;
    default:
      throw DTypeError(std::string("[") + op + "] needs float64, float32, complex128 or complex64, got " +
                       dtype_name(t));
  }
}

namespace {
void check_same_dtype(const char* op, Inputs in) {
  for (int i = 1; i < in.n; ++i)
    if (in[i].dtype() != in[0].dtype())
      throw DTypeError(std::string("[") + op + "] input 0 is " + dtype_name(in[0].dtype()) + " but input " +
                       std::to_string(i) + " is " + dtype_name(in[i].dtype()) +
                       "; convert one with astype (Tenax never converts silently)");
}
}  // namespace

void check_numeric_operands(const char* op, Inputs in) {
  for (int i = 0; i < in.n; ++i) (void)numeric_index(in[i].dtype(), op);
  check_same_dtype(op, in);
}

void check_float_operands(const char* op, Inputs in) {
  for (int i = 0; i < in.n; ++i) {
    (void)float_index(in[i].dtype(), op);
    if (in[i].dtype() != in[0].dtype())
      throw DTypeError(std::string("[") + op + "] input 0 is " + dtype_name(in[0].dtype()) + " but input " +
                       std::to_string(i) + " is " + dtype_name(in[i].dtype()) +
                       "; convert one with astype (Tenax never converts silently)");
  }
}

LoopDims loop_dims(const Axes& axes) {
  LoopDims d;
  d.rank = axes.rank();
  for (int i = 0; i < axes.rank(); ++i) d.sizes[i] = axes.size(i);
  return d;
}

LoopArg loop_arg(const Tensor& t, const Axes& loop) {
  LoopArg a;
  a.data = t.data_ptr();
  const Axes& ax = t.axes();
  for (int l = 0; l < loop.rank(); ++l) {
    int i = ax.index_of(loop.name(l));
    a.strides[l] = i < 0 ? 0 : t.strides()[i];
  }
  return a;
}

void accumulate(const Tensor& out, const Tensor& v) {
  for (int i = 0; i < out.rank(); ++i)
    if (!v.axes().contains(out.axes().name(i)))
      throw ShapeError("[accumulate] value " + v.axes().describe() + " lacks axis '" +
                       out.axes().name(i).str() + "' of " + out.axes().describe());
  const KernelTable& k = kernels(out.device());
  LoopArg args[2] = {loop_arg(out, v.axes()), loop_arg(v, v.axes())};
  need(k.acc[numeric_index(out.dtype(), "accumulate")], "accumulate", out.device())(loop_dims(v.axes()), args);
}

const Tensor& adjoint_for_pass(VjpContext& c, int i, int64_t loop_numel, bool& assign) {
  bool fresh = false;
  const Tensor& dst = c.adjoint_to_write(i, fresh);
  assign = fresh && loop_numel == dst.numel();
  if (fresh && !assign) fill_zero(dst);
  return dst;
}

Tensor zeros_with_batch(const Axes& like, const Axes& batch, DType dtype, Device device) {
  Axes ax = like;
  for (int i = 0; i < batch.rank(); ++i) ax.push_back(batch[i]);
  return zeros(ax, dtype, device);
}

Axes batch_axes_of(const Tensor& t, const Axes& primal) {
  Axes extra;
  for (int i = 0; i < t.rank(); ++i)
    if (!primal.contains(t.axes().name(i))) extra.push_back(t.axes()[i]);
  return extra;
}

void fill_zero(const Tensor& t) {
  double zero = 0.0;
  LoopArg args[2] = {loop_arg(t, t.axes()), {}};
  args[1].data = &zero;
  need(kernels(t.device()).fill[numeric_index(t.dtype(), "zero fill")], "zero fill", t.device())(
      loop_dims(t.axes()), args);
}

void add_to_adjoint(VjpContext& c, int i, const Tensor& v) {
  bool assign = false;
  const Tensor& dst = adjoint_for_pass(c, i, v.numel(), assign);
  if (assign)
    copy_into(dst, v);
  else
    accumulate(dst, v);
}

void copy_into(const Tensor& dst, const Tensor& src) {
  const Axes& ax = dst.axes();
  LoopArg args[2] = {loop_arg(dst, ax), loop_arg(src, ax)};
  need(kernels(dst.device()).copy[copy_index(dst.dtype())], "copy", dst.device())(loop_dims(ax), args);
}

Tensor copy_of(const Tensor& t) {
  Tensor out = empty(t.axes(), t.dtype(), t.device());
  copy_into(out, t);
  return out;
}

void batch_offsets(const Tensor& t, const Axes& batch, std::vector<int64_t>& out) {
  out.assign(static_cast<size_t>(batch.numel()), 0);
  const LoopArg along = loop_arg(t, batch);  // t's stride along each batch axis (0: lacks it)
  const int64_t* st = along.strides;
  int64_t idx[kMaxRank] = {};
  int64_t off = 0;
  for (size_t n = 0; n < out.size(); ++n) {
    out[n] = off;
    for (int d = batch.rank() - 1; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < batch.size(d)) break;
      off -= st[d] * batch.size(d);
      idx[d] = 0;
    }
  }
}

bool batch_stride(const Tensor& t, const Axes& batch, int64_t& stride) {
  stride = 0;
  const LoopArg along = loop_arg(t, batch);  // t's stride along each batch axis (0: lacks it)
  int64_t inner = 0;  // the flat index's step of the innermost axis seen so far (0: none yet)
  for (int d = batch.rank() - 1; d >= 0; --d) {
    if (batch.size(d) == 1) continue;
    const int64_t st = along.strides[d];
    if (inner == 0) {
      stride = st;
      inner = batch.size(d);
    } else {
      if (st != stride * inner) return false;
      inner *= batch.size(d);
    }
  }
  return true;
}

AxisList matrix_axes(Name row, Name col, const Axes& of, const char* op) {
  if (row == col)
    throw AxisError(std::string("[") + op + "] the row and column axes are both '" + row.str() +
                    "'; name two different axes of " + of.describe());
  return AxisList{row, col};
}

std::string batch_index(const Axes& batch, int64_t b) {
  std::string s = "{";
  for (int d = batch.rank() - 1; d >= 0; --d) {
    std::string part = batch.name(d).str() + "=" + std::to_string(b % batch.size(d));
    s = d == batch.rank() - 1 ? "{" + part : "{" + part + ", " + s.substr(1);
    b /= batch.size(d);
  }
  return batch.rank() ? s + "}" : "{}";
}

}  // namespace tenax::detail
