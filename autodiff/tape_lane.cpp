// Records by value: a small contiguous elementwise host call (core/ops/lane.h) keeps copies of its
// residuals' values instead of tensor handles, and its reverse rule runs as the op's flat
// derivative kernels on pointers, the adjoints it writes held by value in a per-sweep arena.
// Anything else that reads such an adjoint (another op's rule, a custom node, the caller) gets it
// as a tensor first (unlane), so records of both kinds mix on one tape.
#include <algorithm>
#include <cstring>

#include "tenax/autodiff/tape_impl.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/lane.h"

namespace tenax::detail {
namespace {

// What an absent operand of a flat kernel points at (read only): zeros for a whole call, stepped
// through like the other operands, so that the kernels take their unit-stride loop.
constexpr double kAbsent[kLaneElements] = {};

constexpr std::size_t words_of(std::size_t bytes) { return (bytes + 7) / 8; }

// The element count of `t` where it is contiguous with at most kLaneElements elements, else 0.
inline int64_t lane_numel(const Tensor& t) {
  const Axes& ax = t.axes();
  int64_t expect = 1;
  for (int i = ax.rank() - 1; i >= 0; --i) {
    const int64_t size = ax.size(i);
    if (size != 1 && t.strides()[i] != expect) return 0;
    expect *= size;
    if (expect > kLaneElements) return 0;
  }
  return expect;
}

// How a lane kernel steps through adjoint tensor `a`: 1 laid out as its variable, 0 one value
// broadcast (a sum's lent cotangent), -1 neither.
inline int64_t lane_stride(const Tensor& a) {
  if (a.is_contiguous()) return 1;
  for (int i = 0; i < a.rank(); ++i)
    if (a.axes().size(i) != 1 && a.strides()[i] != 0) return -1;
  return 0;
}

inline bool on_host(const Tensor& t) { return t.storage()->device().kind == Device::Kind::cpu; }

}  // namespace

// The next chunk, made where the arena has none left (the current one, a fresh arena's first).
void LaneArena::next_chunk() {
  if (chunk_ < chunks_.size()) ++chunk_, used_ = 0;
  if (chunk_ == chunks_.size()) chunks_.push_back(std::make_unique_for_overwrite<double[]>(kChunkWords));
}

// The checks and the record in one pass. (The op ran, so its operands share the output's device;
// the ops with a LaneRule take one or two inputs and mark none non-differentiable.)
bool TapeImpl::append_lane(const OpDef& op, Inputs in, Tensor& out) {
  const DType dt = out.dtype();
  if (keep_all_ || (dt != DType::f64 && dt != DType::f32) || out.shard_id() != 0 || !on_host(out) || in.n > 2)
    return false;
  const int64_t count = lane_numel(out);
  if (count == 0) return false;
  const Axes& ax = out.axes();
  const int rank = ax.rank();
  int32_t vars[2] = {-1, -1};
  int32_t axes_index = -1;
  uint8_t scalars = 0;
  for (int i = 0; i < in.n; ++i) {
    const Tensor& t = in[i];
    if (t.dtype() != dt || t.shard_id() != 0) return false;
    const int32_t v = t.var() >= 0 && t.tape_serial() == serial_ ? t.var() : -1;  // this tape's variable
    vars[i] = v;
    if (t.rank() == 0 && rank != 0) {
      if (v >= 0) return false;  // its adjoint would be a sum over the output
      scalars = static_cast<uint8_t>(scalars | (1u << i));
      continue;
    }
    if (!(t.axes() == ax)) return false;
    for (int d = 0; d < rank; ++d)  // laid out as the (contiguous) output
      if (t.strides()[d] != out.strides()[d] && ax.size(d) != 1) return false;
    if (v >= 0) {
      const VarInfo& info = a_.vars[static_cast<size_t>(v)];
      if (info.view) return false;  // its adjoint is a view of its parent's
      axes_index = info.axes;       // the output's axes too
    }
  }
  if (a_.records.size() == a_.records.capacity()) check_growth();
  const auto rid = static_cast<int32_t>(a_.records.size());
  const auto first_input = static_cast<int32_t>(a_.inputs.size());
  for (int i = 0; i < in.n; ++i) a_.inputs.push_back(vars[i]);
  a_.vars.push_back({axes_index >= 0 ? axes_index : intern_axes(ax), dt, false, out.device(), rid});
  const auto out_var = static_cast<int32_t>(a_.vars.size() - 1);
  TensorAccess::set_var(out, out_var, serial_);
  if (g_source) a_.sources.emplace_back(rid, g_source);
  const int32_t first_saved = op.saves != 0 ? save_lane(op, in, out, count, scalars) : 0;
  Record& r = a_.records.emplace_back();
  r.op = &op;
  r.attrs = -1;
  r.out = out_var;
  r.first_input = first_input;
  r.n_inputs = in.n;
  r.first_saved = first_saved;
  r.lane_n = static_cast<uint16_t>(count);
  r.lane_scalars = scalars;
  ++lane_records_;
  return true;
}

// GCC turns a loop of word copies into a memcpy call unless told not to, here and in save_lane,
// which inlines it (clang has no such per-function switch and needs none).
#if defined(__GNUC__) && !defined(__clang__)
#define TENAX_NO_MEMCPY_IDIOM [[gnu::optimize("no-tree-loop-distribute-patterns")]]
#else
#define TENAX_NO_MEMCPY_IDIOM
#endif

// Words are copied as words (a residual's few elements: a library memcpy per residual cost more
// than the copy), a float32 tensor's odd last element by itself.
TENAX_NO_MEMCPY_IDIOM [[gnu::always_inline]] inline void copy_words(double* __restrict to,
                                                                   const double* __restrict from,
                                                                   std::size_t bytes) {
  const std::size_t whole = bytes / 8;
  for (std::size_t k = 0; k < whole; ++k) to[k] = from[k];
  if (bytes % 8 != 0) std::memcpy(to + whole, from + whole, 4);
}

TENAX_NO_MEMCPY_IDIOM int32_t TapeImpl::save_lane(const OpDef& op, Inputs in, const Tensor& out, int64_t n,
                                                 uint8_t scalars) {
  // The residuals, in order: the saved inputs, then the output.
  const void* from[3];
  std::size_t bytes[3];
  int k = 0;
  const std::size_t item = itemsize(out.dtype()), whole = static_cast<std::size_t>(n) * item;
  const uint32_t s = op.saves;
  for (int i = 0; i < in.n; ++i)
    if (s & (1u << i)) {
      from[k] = in[i].data_ptr();
      bytes[k++] = (scalars >> i) & 1u ? item : whole;
    }
  if (s & kSaveOutput) {
    from[k] = out.data_ptr();
    bytes[k++] = whole;
  }
  std::size_t words = 0;
  for (int j = 0; j < k; ++j) words += words_of(bytes[j]);
  std::vector<double>& v = a_.values;
  if (a_.values_used + words > v.size()) [[unlikely]] {
    const std::size_t grown = std::max<std::size_t>({2 * v.size(), a_.values_used + words, 1024});
    check_memory_budget(Device::cpu(), static_cast<int64_t>((grown - v.size()) * sizeof(double)),
                        "the tape's residual values");
    v.resize(grown);
  }
  const auto first = static_cast<int32_t>(a_.values_used);
  double* to = v.data() + a_.values_used;
  for (int j = 0; j < k; ++j) {
    copy_words(to, static_cast<const double*>(from[j]), bytes[j]);
    to += words_of(bytes[j]);
    residual_bytes_ += static_cast<int64_t>(bytes[j]);
  }
  a_.values_used += words;
  return first;
}

void* TapeImpl::lane_cotangent(int32_t v, int64_t& stride) {
  stride = 1;
  if (void* p = a_.lane_adjoints[static_cast<size_t>(v)]) return p;
  if (!a_.adjoints.defined(static_cast<size_t>(v))) return nullptr;
  Tensor& a = a_.adjoints[static_cast<size_t>(v)];
  if (!a_.partial.empty()) make_whole(v);
  stride = lane_stride(a);  // read in place, a lent broadcast too
  if (stride < 0) {
    (void)owned(v);
    if (!a.is_contiguous()) a = contiguous(a);
    stride = 1;
  }
  return a.data_ptr();
}

void* TapeImpl::lane_target(int32_t v, std::size_t bytes, bool& assign) {
  void*& slot = a_.lane_adjoints[static_cast<size_t>(v)];
  assign = false;
  if (slot) {
    if (a_.lent[static_cast<size_t>(v)]) {  // another variable's cotangent: copied before it is added to
      double* own = a_.arena.alloc(words_of(bytes));
      std::memcpy(own, slot, bytes);
      slot = own;
      a_.lent[static_cast<size_t>(v)] = 0;
      ++adjoint_buffers_;
      adjoint_bytes_ += static_cast<int64_t>(bytes);
    }
    return slot;
  }
  if (a_.adjoints.defined(static_cast<size_t>(v))) {
    Tensor& a = a_.adjoints[static_cast<size_t>(v)];
    if (!a_.lent[static_cast<size_t>(v)] || !a_.partial.empty()) {  // a buffer of its own: added to in place
      Tensor& o = owned(v);
      if (!o.is_contiguous()) o = contiguous(o);
      return o.data_ptr();
    }
    // A lent tensor (a sum's broadcast cotangent, say) is copied into a slot, which later
    // contributions find first.
    const int64_t step = lane_stride(a);
    if (step < 0) return owned(v).data_ptr();  // (not reached: lent values are laid out as v or broadcast)
    double* own = a_.arena.alloc(words_of(bytes));
    const std::size_t item = itemsize(a.dtype());
    for (std::size_t k = 0; k < bytes; k += item)
      std::memcpy(reinterpret_cast<char*>(own) + k, static_cast<const char*>(a.data_ptr()) + (step ? k : 0), item);
    a = Tensor();
    a_.lent[static_cast<size_t>(v)] = 0;
    slot = own;
  } else {
    if (!lane_home(v)) {  // one tensor from the start
      assign = true;
      return own_adjoint(v, false).data_ptr();
    }
    assign = true;
    slot = a_.arena.alloc(words_of(bytes));
  }
  ++adjoint_buffers_;
  adjoint_bytes_ += static_cast<int64_t>(bytes);
  return slot;
}

// The operands: [0] the adjoint, [1] the cotangent, [2 + i] input i's residual, [2 + n] the output's.
void TapeImpl::lane_vjp(const Record& r) {
  if (r.n_inputs == 2)
    lane_vjp_of<2>(r);
  else
    lane_vjp_of<1>(r);
}

template <int Inputs>
void TapeImpl::lane_vjp_of(const Record& r) {
  int64_t g_stride = 1;
  void* g = a_.lane_adjoints[static_cast<size_t>(r.out)];
  if (!g && !(g = lane_cotangent(r.out, g_stride))) return;
  const int dt = var(r.out).dtype == DType::f64 ? 0 : 1;
  const int64_t n = r.lane_n;
  const std::size_t bytes = static_cast<std::size_t>(n) * (dt == 0 ? 8 : 4), words = words_of(bytes);
  auto* absent = const_cast<double*>(kAbsent);
  FlatArg args[5] = {{nullptr, 1, 0}, {g, g_stride, 0}, {absent, 1, 0}, {absent, 1, 0}, {absent, 1, 0}};
  const double* p = a_.values.data() + r.first_saved;
  const uint32_t s = r.op->saves;
  constexpr int inputs = Inputs;
  for (int i = 0; i < inputs; ++i)
    if (s & (1u << i)) {
      const bool scalar = (r.lane_scalars >> i) & 1u;
      args[2 + i] = {const_cast<double*>(p), scalar ? 0 : 1, 0};
      p += scalar ? 1 : words;
    }
  if (s & kSaveOutput) args[2 + inputs] = {const_cast<double*>(p), 1, 0};
  const LaneRule& rule = *r.op->lane;
  const LaneKernels& kernels = rule.kernels();
  for (int side = 0; side < inputs; ++side) {
    const int32_t v = a_.inputs[static_cast<size_t>(r.first_input + side)];
    if (v < 0) continue;
    void*& slot = a_.lane_adjoints[static_cast<size_t>(v)];
    if (((rule.identity >> side) & 1u) && !slot && !a_.adjoints.defined(static_cast<size_t>(v))) {
      // The cotangent lent as v's adjoint: a broadcast tensor as the tensor (tape_adjoints.cpp),
      // anything else as its pointer.
      if (g_stride == 0)
        a_.adjoints[static_cast<size_t>(v)] = a_.adjoints[static_cast<size_t>(r.out)];
      else
        slot = g;
      a_.lent[static_cast<size_t>(v)] = 1;
      continue;
    }
    bool assign = false;
    args[0].data = slot && !a_.lent[static_cast<size_t>(v)] ? slot : lane_target(v, bytes, assign);
    kernels.f[dt][side][assign ? 1 : 0](1, n, args);
  }
}

void TapeImpl::unlane_now(int32_t v) {
  void*& slot = a_.lane_adjoints[static_cast<size_t>(v)];
  const VarInfo& info = var(v);
  Tensor t = empty(var_axes(v), info.dtype, info.device);
  std::memcpy(t.data_ptr(), slot, static_cast<std::size_t>(t.numel()) * itemsize(info.dtype));
  a_.adjoints[static_cast<size_t>(v)] = std::move(t);
  a_.lent[static_cast<size_t>(v)] = 0;
  slot = nullptr;
}

const Tensor& TapeImpl::lane_saved(const Record& r, int slot) {
  const uint32_t s = r.op->saves;
  const VarInfo& info = var(r.out);
  const std::size_t words = words_of(static_cast<std::size_t>(r.lane_n) * itemsize(info.dtype));
  const double* p = a_.values.data() + r.first_saved;
  const int want = slot < 0 ? r.n_inputs : slot;
  for (int i = 0; i < want; ++i)
    if (s & (1u << i)) p += (r.lane_scalars >> i) & 1u ? 1 : words;
  const bool scalar = slot >= 0 && ((r.lane_scalars >> slot) & 1u);
  Tensor& t = lane_held_[slot < 0 ? 3 : slot];
  t = empty(scalar ? Axes() : var_axes(r.out), info.dtype, info.device);
  std::memcpy(t.data_ptr(), p, static_cast<std::size_t>(t.numel()) * itemsize(info.dtype));
  return t;
}

}  // namespace tenax::detail
