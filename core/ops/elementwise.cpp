// Elementwise ops expanded from elementwise.def: forward, fused VJP (accumulating straight into
// the adjoint, reducing broadcast axes on the fly), JVP, and a sampler. Named axes make their
// batching rule "nothing to do".
#include "tenax/core/ops/elementwise.h"

#include <array>
#include "tenax/core/ops/families.h"

#include "tenax/core/ops.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/collective.h"
#include "tenax/core/ops/complex.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/lane.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/align.h"

namespace tenax::detail {
namespace {

constexpr uint32_t kSavesNONE = 0, kSavesX = 1, kSavesY = kSaveOutput;
constexpr uint32_t kSavesA_B = 3, kSavesB_Y = 2 | kSaveOutput, kSavesA_B_Y = 3 | kSaveOutput;

constexpr int deriv_index(BinaryOp b, int side) { return int(DerivOp::add_a) + 2 * int(b) + side; }

// The elementwise ops defined on complex numbers (abs with a real result: |z|).
constexpr bool unary_complex(UnaryOp u) {
  return u == UnaryOp::neg || u == UnaryOp::square || u == UnaryOp::exp || u == UnaryOp::log ||
         u == UnaryOp::sqrt || u == UnaryOp::tanh || u == UnaryOp::abs;
}
constexpr bool binary_complex(BinaryOp b) {
  return b == BinaryOp::add || b == BinaryOp::sub || b == BinaryOp::mul || b == BinaryOp::div || b == BinaryOp::pow;
}

// The dtype index (numeric_index) of a call; a complex dtype where the op is not defined on complex
// numbers is a DTypeError ("[maximum] is not defined for complex128").
int op_index(DType t, const char* name, bool defined_on_complex) {
  const int idx = numeric_index(t, name);
  if (idx >= 2 && !defined_on_complex) (void)float_index(t, name);
  return idx;
}
int unary_index(UnaryOp u, DType t) { return op_index(t, unary_name(u), unary_complex(u)); }
int binary_index(BinaryOp b, DType t) { return op_index(t, binary_name(b), binary_complex(b)); }

// A derivative kernel for a JVP: the real tables' entry, or for complex dtypes the unconjugated
// form (ComplexKernels::tangent_*); the deriv tables' complex entries are the VJP forms.
ElementwiseFn tangent_kernel(const KernelTable& k, int d, int idx, bool set) {
  if (idx < 2) return (set ? k.deriv_set : k.deriv_acc)[d][idx];
  return (set ? k.complex.tangent_set : k.complex.tangent_acc)[d][idx - 2];
}

// The host flat twins of one row of a four-dtype kernel table.
std::array<FlatFn, kNumeric> flats_of(const ElementwiseFn (&row)[kNumeric]);

// The eager fast path: a small host call, not captured, whose operands are laid out alike — each
// contiguous with the output's axes in order, or a single element (rank 0) — runs the kernel's
// flat twin over the elements in memory order: no axis alignment, no per-axis loop arguments.
// Larger calls take the planned loop (which may split across threads).
constexpr int64_t kFlatEager = 1 << 12;

bool flat_operand(const Tensor& t, const Axes& out) {
  return t.rank() == 0 || ((&t.axes() == &out || t.axes() == out) && t.is_contiguous());
}

// The flat twin of the host kernel `fn` (looked up once per kernel by the caller's static).
FlatFn host_flat(ElementwiseFn fn) { return fn ? flat_twin(fn) : nullptr; }

std::array<FlatFn, kNumeric> flats_of(const ElementwiseFn (&row)[kNumeric]) {
  std::array<FlatFn, kNumeric> f{};
  for (int d = 0; d < kNumeric; ++d) f[size_t(d)] = host_flat(row[d]);
  return f;
}

// The dtype index of a lane call (numeric_index without its error: -1 where the lane does not
// apply, and the general path names the problem).
inline int lane_index(DType t) {
  static constexpr int8_t kIndex[] = {0, 1, -1, -1, 2, 3};  // DType's order: f64 f32 i64 b8 c128 c64
  static_assert(int(DType::c128) == 4 && int(DType::c64) == 5 && int(DType::b8) == 3);
  return size_t(t) < sizeof kIndex ? kIndex[size_t(t)] : -1;
}

// A lane call's plan: its element count and the result's (contiguous) strides.
struct Lane {
  int64_t n;
  int64_t strides[kMaxRank];
};

// One pass over `big`'s axes: the result's strides and element count, and whether `big` and
// `other` (null for a unary call) run flat — each laid out contiguously with big's axes in order,
// or `other` a single element — with at most kFlatEager elements.
inline bool plan_lane(const Tensor& big, const Tensor* other, Lane& lane) {
  const Axes& ax = big.axes();
  const int r = ax.rank();
  if (other && other->rank() == 0) other = nullptr;
  if (other && other->rank() != r) return false;
  const bool same_axes = !other || &other->axes() == &ax;
  int64_t expect = 1;
  for (int i = r - 1; i >= 0; --i) {
    const int64_t size = ax.size(i);
    lane.strides[i] = expect;
    if (size != 1 && (big.strides()[i] != expect || (other && other->strides()[i] != expect))) return false;
    if (!same_axes && (other->axes().name(i) != ax.name(i) || other->axes().size(i) != size)) return false;
    expect *= size;
    if (expect > kFlatEager) return false;  // partial products only grow (or stay 0)
  }
  lane.n = expect;
  return true;
}

// Whether a call's dtypes and device take the fast path: host, not captured, one dtype the op is
// defined on; its flat twin, or null.
template <class Row>
FlatFn lane_flat(const Row& flats, const Tensor& big, DType other, bool complex_ok) {
  const int idx = lane_index(big.dtype());
  if (g_capture || idx < 0 || other != big.dtype() || (idx >= 2 && !complex_ok) ||
      big.storage()->device().kind != Device::Kind::cpu)
    return nullptr;
  return flats[size_t(idx)];
}

// The lane's result and the flat twin run over it.
template <int N>
[[gnu::always_inline]] inline Tensor run_lane(FlatFn flat, const Tensor& like, const Lane& lane,
                                              const Tensor* const* in) {
  StoragePtr st(Storage::allocate(static_cast<std::size_t>(lane.n) * itemsize(like.dtype()), Device::cpu()));
  Tensor out = TensorAccess::fresh(std::move(st), like.axes(), lane.strides, like.dtype());
  FlatArg args[N + 1];
  args[0] = {out.data_ptr(), 1, 0};
  for (int k = 0; k < N; ++k) args[k + 1] = {in[k]->data_ptr(), in[k]->rank() == 0 ? 0 : 1, 0};
  flat(1, lane.n, args);
  return out;
}

template <UnaryOp U>
Tensor unary_forward(Inputs in, const Attrs&) {
  {
    static const std::array<FlatFn, kNumeric> flats = flats_of(real_kernels(0).unary[int(U)]);
    const Tensor& x = in[0];
    Lane lane;
    if (const FlatFn flat = lane_flat(flats, x, x.dtype(), unary_complex(U) && U != UnaryOp::abs);
        flat && plan_lane(x, nullptr, lane)) {
      const Tensor* ops[1] = {&x};
      return run_lane<1>(flat, x, lane, ops);
    }
  }
  const char* name = unary_name(U);
  check_numeric_operands(name, in);
  if constexpr (U == UnaryOp::abs)
    if (is_complex(in[0].dtype())) return complex_abs_forward(in[0]);
  const int idx = unary_index(U, in[0].dtype());
  const Axes& ax = in[0].axes();
  Tensor out = empty(ax, in[0].dtype(), in[0].device());
  LoopArg args[2] = {loop_arg(out, ax), loop_arg(in[0], ax)};
  need(kernels(out.device()).unary[int(U)][idx], name, out.device())(loop_dims(ax), args);
  return out;
}

template <UnaryOp U, uint32_t S>
void unary_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  if constexpr (U == UnaryOp::abs)
    if (is_complex(c.input(0).dtype())) return complex_abs_vjp(c);
  const Tensor& g = c.cotangent();
  bool assign = false;
  const Tensor& dst = adjoint_for_pass(c, 0, g.numel(), assign);
  const Axes& ax = g.axes();
  LoopArg args[4] = {loop_arg(dst, ax), loop_arg(g, ax), (S & 1) ? loop_arg(c.input(0), ax) : no_arg(),
                     (S & kSaveOutput) ? loop_arg(c.output(), ax) : no_arg()};
  const KernelTable& k = kernels(g.device());
  (assign ? k.deriv_set : k.deriv_acc)[int(DerivOp::unary_neg) + int(U)][numeric_index(g.dtype(), "vjp")](
      loop_dims(ax), args);
}

// The JVPs loop over the output's axes and any batch axes the tangents add (forward_tangent).
template <UnaryOp U>
Tensor unary_jvp(JvpContext& c) {
  if constexpr (U == UnaryOp::abs)
    if (is_complex(c.input(0).dtype())) return complex_abs_jvp(c);
  const Tensor& y = c.output();
  const Axes ax = align_axes(c.tangent(0).axes(), y.axes(), "jvp");
  Tensor out = empty(ax, y.dtype(), y.device());
  LoopArg args[4] = {loop_arg(out, ax), loop_arg(c.tangent(0), ax), loop_arg(c.input(0), ax),
                     loop_arg(y, ax)};
  tangent_kernel(kernels(y.device()), int(DerivOp::unary_neg) + int(U), numeric_index(y.dtype(), "jvp"), true)(
      loop_dims(ax), args);
  return out;
}

template <BinaryOp B>
Tensor binary_forward(Inputs in, const Attrs&) {
  {
    static const std::array<FlatFn, kNumeric> flats = flats_of(real_kernels(0).binary[int(B)]);
    const bool first = in[0].rank() >= in[1].rank();
    const Tensor& big = first ? in[0] : in[1];
    const Tensor& other = first ? in[1] : in[0];
    Lane lane;
    if (const FlatFn flat = lane_flat(flats, big, other.dtype(), binary_complex(B));
        flat && plan_lane(big, &other, lane)) {
      const Tensor* ops[2] = {&in[0], &in[1]};
      return run_lane<2>(flat, big, lane, ops);
    }
  }
  const char* name = binary_name(B);
  check_numeric_operands(name, in);
  const int idx = binary_index(B, in[0].dtype());
  Axes ax = align_axes(in[0].axes(), in[1].axes(), name);
  Tensor out = empty(ax, in[0].dtype(), in[0].device());
  LoopArg args[3] = {loop_arg(out, ax), loop_arg(in[0], ax), loop_arg(in[1], ax)};
  need(kernels(out.device()).binary[int(B)][idx], name, out.device())(loop_dims(ax), args);
  return out;
}

// What an absent operand of a flat twin points at (read only, whatever its dtype).
const double kAbsent[2] = {0.0, 0.0};

// The flat twins of an op's derivative kernels (core/ops/lane.h), looked up once per op: what the
// reverse rules by value and the eager VJP's flat path (binary_vjp_flat) run.
template <int First, int Sides>
const LaneKernels& lane_kernels_of() {
  static const LaneKernels k = [] {
    LaneKernels t;
    const KernelTable& table = real_kernels(0);
    for (int d = 0; d < kNumeric; ++d)
      for (int side = 0; side < Sides; ++side) {
        t.f[d][side][0] = host_flat(table.deriv_acc[First + side][d]);
        t.f[d][side][1] = host_flat(table.deriv_set[First + side][d]);
      }
    return t;
  }();
  return k;
}

// The flat twin of a binary op's derivative kernel for input `side`, by dtype index.
template <BinaryOp B>
FlatFn deriv_flat_fn(int side, bool assign, int dt) {
  return lane_kernels_of<deriv_index(B, 0), 2>().f[dt][side][assign ? 1 : 0];
}

// The VJP's eager fast path (as binary_lane): the cotangent a small contiguous host tensor, not
// captured, and the saved values (null where not saved) laid out alike; checked once per call.
template <uint32_t S>
bool vjp_lane(const Tensor& g, const Tensor* const* saved, int64_t& n) {
  if (g_capture || g.storage()->device().kind != Device::Kind::cpu) return false;
  Lane lane;
  if (!plan_lane(g, nullptr, lane)) return false;
  for (int k = 0; k < 3; ++k)
    if (saved[k] && !flat_operand(*saved[k], g.axes())) return false;
  n = lane.n;
  return true;
}

// One side's adjoint pass through the derivative kernel's flat twin; false where `dst` is not laid
// out as the cotangent (or the dtype has no twin).
template <BinaryOp B>
bool binary_vjp_flat(int side, bool assign, const Tensor& g, const Tensor& dst, const Tensor* const* saved,
                     int64_t n) {
  const int idx = lane_index(g.dtype());  // (-1: the general path names the dtype)
  if (idx < 0 || dst.rank() != g.rank() || !flat_operand(dst, g.axes())) return false;
  const FlatFn flat = deriv_flat_fn<B>(side, assign, idx);
  if (!flat) return false;
  auto arg = [](const Tensor* t) -> FlatArg {
    if (!t) return {const_cast<double*>(kAbsent), 0, 0};
    return {t->data_ptr(), t->rank() == 0 ? 0 : 1, 0};
  };
  const FlatArg args[5] = {{dst.data_ptr(), 1, 0}, {g.data_ptr(), 1, 0}, arg(saved[0]), arg(saved[1]), arg(saved[2])};
  flat(1, n, args);
  return true;
}

// The reverse rules by value (core/ops/lane.h).
template <UnaryOp U>
constexpr LaneRule kUnaryLane{lane_kernels_of<int(DerivOp::unary_neg) + int(U), 1>, 0};
// a + b passes the cotangent to both operands, a - b to its first.
template <BinaryOp B>
constexpr LaneRule kBinaryLane{lane_kernels_of<deriv_index(B, 0), 2>,
                               B == BinaryOp::add ? uint8_t{3} : B == BinaryOp::sub ? uint8_t{1} : uint8_t{0}};

template <BinaryOp B, uint32_t S>
void binary_vjp(VjpContext& c) {
  const Tensor& g = c.cotangent();
  const Axes& ax = g.axes();
  // The saved values, fetched once (each a virtual call).
  const Tensor* saved[3] = {(S & 1) ? &c.input(0) : nullptr, (S & 2) ? &c.input(1) : nullptr,
                            (S & kSaveOutput) ? &c.output() : nullptr};
  int64_t n = 0;
  bool lane = false, planned = false;
  for (int side = 0; side < 2; ++side) {
    if (!c.needs_grad(side)) continue;
    // The cotangent itself is the adjoint of a + b's operands and of a - b's first: lent where the
    // input has no adjoint yet and the cotangent's axes (no copy; one is made only if another
    // contribution comes).
    if constexpr (B == BinaryOp::add || B == BinaryOp::sub)
      if ((B == BinaryOp::add || side == 0) && c.lends() && c.lend_adjoint(side, g)) continue;
    bool assign = false;
    const Tensor& dst = adjoint_for_pass(c, side, g.numel(), assign);
    if (!planned) {
      lane = vjp_lane<S>(g, saved, n);
      planned = true;
    }
    if (lane && binary_vjp_flat<B>(side, assign, g, dst, saved, n)) continue;
    const auto arg = [&](const Tensor* t) { return t ? loop_arg(*t, ax) : no_arg(); };
    LoopArg args[5] = {loop_arg(dst, ax), loop_arg(g, ax), arg(saved[0]), arg(saved[1]), arg(saved[2])};
    const KernelTable& k = kernels(g.device());
    (assign ? k.deriv_set : k.deriv_acc)[deriv_index(B, side)][numeric_index(g.dtype(), "vjp")](loop_dims(ax),
                                                                                                args);
  }
}

template <BinaryOp B>
Tensor binary_jvp(JvpContext& c) {
  const Tensor& y = c.output();
  Axes ax = y.axes();
  for (int side = 0; side < 2; ++side)
    if (c.tangent(side).defined()) ax = align_axes(c.tangent(side).axes(), ax, "jvp");
  // a + b, a - b with one tangent covering the output: that tangent itself (tangents are values).
  if constexpr (B == BinaryOp::add || B == BinaryOp::sub) {
    const Tensor& ta = c.tangent(0);
    const Tensor& tb = c.tangent(1);
    if (ta.defined() != tb.defined()) {
      const Tensor& t = ta.defined() ? ta : tb;
      if ((B == BinaryOp::add || ta.defined()) && t.axes() == ax && t.dtype() == y.dtype()) return t;
    }
    // Both, laid out as the output's tangent: the op itself (one pass, its flat kernels).
    if (ta.defined() && tb.defined() && ta.axes() == ax && tb.axes() == ax && ta.dtype() == y.dtype() &&
        tb.dtype() == y.dtype()) {
      const Tensor* both[2] = {&ta, &tb};
      return binary_forward<B>(Inputs{both, 2}, Attrs{});
    }
  }
  // The first side's term written (the loop covers every element of out), the second's added.
  Tensor out = empty(ax, y.dtype(), y.device());
  bool written = false;
  for (int side = 0; side < 2; ++side) {
    if (!c.tangent(side).defined()) continue;
    LoopArg args[5] = {loop_arg(out, ax), loop_arg(c.tangent(side), ax), loop_arg(c.input(0), ax),
                       loop_arg(c.input(1), ax), loop_arg(y, ax)};
    tangent_kernel(kernels(y.device()), deriv_index(B, side), numeric_index(y.dtype(), "jvp"), !written)(
        loop_dims(ax), args);
    written = true;
  }
  if (!written) fill_zero(out);
  return out;
}

// Domains keep samples away from poles, branch cuts and kinks, where finite differences lie.
OpSample unary_sample(UnaryOp u, SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  Tensor x;
  switch (u) {
    case UnaryOp::log:
    case UnaryOp::sqrt:
      x = random_values(rng, ax, dt, 0.5, 2.0);
      break;
    case UnaryOp::log1p:
      x = random_values(rng, ax, dt, -0.5, 2.0);
      break;
    case UnaryOp::abs:
      x = random_signed(rng, ax, dt, 0.2, 2.0);
      break;
    default:
      x = random_values(rng, ax, dt, -2.0, 2.0);
      break;
  }
  return {{x}, {}};
}

OpSample binary_sample(BinaryOp b, SampleRng& rng, DType dt) {
  Axes base = random_axes(rng, 1 + int(rng() % 3));
  Axes ax_a = random_subset(rng, base), ax_b = random_subset(rng, base);
  if (ax_a.rank() == 0) ax_a = base;
  Tensor a, x;
  switch (b) {
    case BinaryOp::pow:
      a = random_values(rng, ax_a, dt, 0.5, 2.0);
      x = random_values(rng, ax_b, dt, -1.5, 1.5);
      break;
    case BinaryOp::div:
      a = random_values(rng, ax_a, dt, -2.0, 2.0);
      x = random_signed(rng, ax_b, dt, 0.5, 2.0);
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum:
      // b = a's values shifted by at least 0.2 either way: no ties within FD reach.
      ax_b = ax_a;
      a = random_values(rng, ax_a, dt, -2.0, 2.0);
      x = add(a, random_signed(rng, ax_b, dt, 0.2, 1.0));
      break;
    default:
      a = random_values(rng, ax_a, dt, -2.0, 2.0);
      x = random_values(rng, ax_b, dt, -2.0, 2.0);
      break;
  }
  return {{a, x}, {}};
}

// The public functions' entry: apply's checks, errors and recording (dispatch.h's pieces) around
// a direct call of the forward (no call through the op table). No attributes: nothing an
// enclosing nmap's mapped axes could be asked about.
// (Its own function: with `out` the only thing returned, the result is built in the caller's
// slot; beside apply_direct's other return, GCC moved its 208 bytes there instead.)
template <auto Forward>
Tensor forward_direct(const OpDef& op, Inputs in) {
  Tensor out = [&] {
    try {
      return Forward(in, kNoAttrs);
    } catch (...) {
      rethrow_naming_op(op);
    }
  }();
  finish_forward(op, in, kNoAttrs, out);
  return out;
}

template <auto Forward>
Tensor apply_direct(const OpDef& op, Inputs in) {
  if (check_inputs(op, in) && !g_sweep_local) [[unlikely]]
    return apply_sharded(op, in, kNoAttrs);
  return forward_direct<Forward>(op, in);
}

#define TENAX_UNARY(id, f, df, saves_)                                                                    \
  const OpDef op_##id = {.name = #id,                                                                     \
                         .arity = 1,                                                                      \
                         .forward = unary_forward<UnaryOp::id>,                                           \
                         .vjp = unary_vjp<UnaryOp::id, kSaves##saves_>,                                   \
                         .jvp = unary_jvp<UnaryOp::id>,                                                   \
                         .saves = kSaves##saves_,                                                         \
                         .sample = [](SampleRng& r, DType d) { return unary_sample(UnaryOp::id, r, d); }, \
                         .attr_free = true,                                                               \
                         .lane = &kUnaryLane<UnaryOp::id>,                                                \
                         .complex = unary_complex(UnaryOp::id),                                           \
                         .doc = "elementwise y = " #f "; dy/dx = " #df};
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(id, f, dfa, dfb, saves_)                                                               \
  const OpDef op_##id = {.name = #id,                                                                       \
                         .arity = 2,                                                                        \
                         .forward = binary_forward<BinaryOp::id>,                                           \
                         .vjp = binary_vjp<BinaryOp::id, kSaves##saves_>,                                   \
                         .jvp = binary_jvp<BinaryOp::id>,                                                   \
                         .saves = kSaves##saves_,                                                           \
                         .sample = [](SampleRng& r, DType d) { return binary_sample(BinaryOp::id, r, d); }, \
                         .attr_free = true,                                                                 \
                         .lane = &kBinaryLane<BinaryOp::id>,                                                \
                         .complex = binary_complex(BinaryOp::id),                                           \
                         .doc = "elementwise y = " #f "; dy/da = " #dfa ", dy/db = " #dfb};
#include "tenax/core/ops/elementwise.def"

}  // namespace

const char* unary_name(UnaryOp u) {
  static const char* names[] = {
#define TENAX_UNARY(name, f, df, saves) #name,
#include "tenax/core/ops/elementwise.def"
  };
  return names[int(u)];
}

const char* binary_name(BinaryOp b) {
  static const char* names[] = {
#define TENAX_BINARY(name, f, dfa, dfb, saves) #name,
#include "tenax/core/ops/elementwise.def"
  };
  return names[int(b)];
}

void register_elementwise_ops(std::vector<const OpDef*>& ops) {
#define TENAX_UNARY(name, f, df, saves) ops.push_back(&op_##name);
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves) ops.push_back(&op_##name);
#include "tenax/core/ops/elementwise.def"
}

}  // namespace tenax::detail

namespace tenax {

#define TENAX_UNARY(name, f, df, saves)                                                               \
  Tensor name(const Tensor& x) {                                                                      \
    const Tensor* p[1] = {&x};                                                                        \
    return detail::apply_direct<detail::unary_forward<detail::UnaryOp::name>>(detail::op_##name, {p, 1}); \
  }
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)                                                           \
  Tensor name(const Tensor& a, const Tensor& b) {                                                        \
    const Tensor* p[2] = {&a, &b};                                                                       \
    return detail::apply_direct<detail::binary_forward<detail::BinaryOp::name>>(detail::op_##name, {p, 2}); \
  }
#include "tenax/core/ops/elementwise.def"

namespace {
Tensor like(const Tensor& t, double v) {
  if (!t.defined()) throw Error("[operator] the tensor is undefined");
  return full(Axes{}, v, t.dtype(), t.device());  // on t's device: no mixed-device op
}
}  // namespace

Tensor operator+(const Tensor& a, double b) { return add(a, like(a, b)); }
Tensor operator+(double a, const Tensor& b) { return add(like(b, a), b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, like(a, b)); }
Tensor operator-(double a, const Tensor& b) { return sub(like(b, a), b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, like(a, b)); }
Tensor operator*(double a, const Tensor& b) { return mul(like(b, a), b); }
Tensor operator/(const Tensor& a, double b) { return div(a, like(a, b)); }
Tensor operator/(double a, const Tensor& b) { return div(like(b, a), b); }

}  // namespace tenax
