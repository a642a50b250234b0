// linear_recurrence(a, b, over): x_t = a_t * x_{t-1} + b_t along the named axis `over` (x_{-1} = 0),
// elementwise over every other axis; a and b broadcast by name (a decay without the time axis is
// shared by every step). Any axis can be `over`: the kernel steps through strides, no transpose.
// VJP: one reverse-time recurrence, O(T), with a broadcast decay's adjoint reduced on the fly.
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/capture_rules.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/align.h"

namespace tenax::detail {
namespace {

struct Lanes {
  Axes lanes;  // every result axis but `over`
  Name over;
  int64_t steps = 0;
};

Lanes lanes_of(const Axes& result, Name over) {
  Lanes l{result, over, result.size_of(over, "linear_recurrence")};
  l.lanes.erase(l.lanes.index_of(over));
  return l;
}

int64_t step_of(const Tensor& t, Name over) { return t.has_axis(over) ? t.stride(over) : 0; }

Tensor recurrence_forward(Inputs in, const Attrs& attrs) {
  check_numeric_operands("linear_recurrence", in);
  const Tensor &a = in[0], &b = in[1];
  const Name over = attrs.axes[0];
  Axes ax = align_axes(a.axes(), b.axes(), "linear_recurrence");
  if (!ax.contains(over))
    throw AxisError("[linear_recurrence] neither a " + a.axes().describe() + " nor b " + b.axes().describe() +
                    " has the recurrence axis '" + over.str() + "'");
  Tensor x = empty(ax, a.dtype(), a.device());
  Lanes l = lanes_of(ax, over);
  std::vector<int64_t> oa, ob, ox;
  batch_offsets(a, l.lanes, oa);
  batch_offsets(b, l.lanes, ob);
  batch_offsets(x, l.lanes, ox);
  RecurrenceArgs r{l.steps, static_cast<int64_t>(ox.size()), oa.data(), ob.data(), ox.data(),
                   step_of(a, over), step_of(b, over), step_of(x, over), a.data_ptr(), b.data_ptr(), x.data_ptr()};
  need(kernels(x.device()).recurrence[numeric_index(x.dtype(), "linear_recurrence")], "linear_recurrence",
       x.device())(r);
  return x;
}

void recurrence_vjp(VjpContext& c) {
  const Tensor& a = c.input(0);
  const Tensor& x = c.output();
  const Tensor& g = c.cotangent();
  const Name over = c.attrs().axes[0];
  // Lanes over the cotangent's axes: a batched cotangent (several VJPs at once) adds lanes that
  // a and x are broadcast along.
  Lanes l = lanes_of(g.axes(), over);
  std::vector<int64_t> oa, ox, og, oda, odb;
  batch_offsets(a, l.lanes, oa);
  batch_offsets(x, l.lanes, ox);
  batch_offsets(g, l.lanes, og);
  RecurrenceVjpArgs r;
  r.fwd = {l.steps, static_cast<int64_t>(ox.size()), oa.data(), nullptr, ox.data(),
           step_of(a, over), 0, step_of(x, over), a.data_ptr(), nullptr, x.data_ptr()};
  r.off_g = og.data();
  r.step_g = step_of(g, over);
  r.g = g.data_ptr();
  // Where input i's adjoint lanes start and how they step (left null when no gradient is wanted).
  auto bind_adjoint = [&](int i, std::vector<int64_t>& off, const int64_t*& off_ptr, int64_t& step, void*& data) {
    if (!c.needs_grad(i)) return;
    const Tensor& adj = c.adjoint(i);
    batch_offsets(adj, l.lanes, off);
    off_ptr = off.data();
    step = step_of(adj, over);
    data = adj.data_ptr();
  };
  bind_adjoint(0, oda, r.off_da, r.step_da, r.da);
  bind_adjoint(1, odb, r.off_db, r.step_db, r.db);
  need(kernels(x.device()).recurrence_vjp[numeric_index(x.dtype(), "linear_recurrence")], "linear_recurrence",
       x.device())(r);
}

// tx_t = a_t tx_{t-1} + (ta_t x_{t-1} + tb_t): the same recurrence on the linearised input.
Tensor recurrence_jvp(JvpContext& c) {
  const Tensor& x = c.output();
  const Name over = c.attrs().axes[0];
  Tensor rhs = c.tangent(1);
  if (c.tangent(0).defined()) {
    const int64_t steps = x.size(over);
    Axes first = x.axes();
    first.set_size(first.index_of(over), 1);
    Tensor x_prev = concat({zeros(first, x.dtype(), x.device()), slice(x, over, 0, steps - 1)}, over);
    Tensor term = c.tangent(0) * x_prev;
    rhs = rhs.defined() ? rhs + term : term;
  }
  return linear_recurrence(c.input(0), rhs, over);
}

OpSample recurrence_sample(SampleRng& rng, DType dt) {
  Axes base = random_axes(rng, int(rng() % 3));
  Axis time{"t", 1 + int64_t(rng() % 6)};
  Axes b_axes = random_subset(rng, base);
  b_axes.push_back(time);
  Axes a_axes = random_subset(rng, base);
  if (rng() % 3 != 0) a_axes.push_back(time);  // sometimes a decay shared by every step
  OpSample s{{random_values(rng, a_axes, dt, -0.9, 0.9), random_values(rng, b_axes, dt, -1, 1)}, {}};
  s.attrs.axes = AxisList{"t"};
  return s;
}

constexpr AttrSpec kRecurrenceAttrs[] = {{"over", AttrKind::name, "the time axis"}};
const OpDef op_linear_recurrence = {
    .name = "linear_recurrence",
    .arity = 2,
    .forward = recurrence_forward,
    .vjp = recurrence_vjp,
    .jvp = recurrence_jvp,
    .saves = 1u | kSaveOutput,
    .sample = recurrence_sample,
    .complex = true,
    .attrs = kRecurrenceAttrs,
    .doc = "x_t = a_t x_{t-1} + b_t along `over` (x_{-1} = 0), elementwise over every other axis"};

}  // namespace

// ---- capture rules: this family's kernels in a scan step's captured program (capture_rules.h) ----
namespace {

template <int Dev, int Dt>
void recurrence_trampoline(const RecurrenceArgs& r) {
  const RecurrenceFn fn = real_kernels(Dev).recurrence[Dt];
  LaneCopy lc;
  lc.take_forward(r);
  g_capture->other(
      [fn, r, lc] {
        RecurrenceArgs c = r;
        lc.bind_forward(c);
        fn(c);
        return int64_t{-1};
      },
      "linear_recurrence");
}
template <int Dev, int Dt>
void recurrence_vjp_trampoline(const RecurrenceVjpArgs& r) {
  const RecurrenceVjpFn fn = real_kernels(Dev).recurrence_vjp[Dt];
  LaneCopy lc;
  lc.take_forward(r.fwd);
  lc.take(3, r.off_g, r.fwd.lanes);
  lc.take(4, r.off_da, r.fwd.lanes);
  lc.take(5, r.off_db, r.fwd.lanes);
  g_capture->other(
      [fn, r, lc] {
        RecurrenceVjpArgs c = r;
        lc.bind_forward(c.fwd);
        c.off_g = lc.at(3);
        c.off_da = lc.at(4);
        c.off_db = lc.at(5);
        fn(c);
        return int64_t{-1};
      },
      "linear_recurrence vjp");
}

template <int Dev>
void install_capture(KernelTable& t) {
  swap_in(t.recurrence[0], &recurrence_trampoline<Dev, 0>);
  swap_in(t.recurrence[1], &recurrence_trampoline<Dev, 1>);
  swap_in(t.recurrence_vjp[0], &recurrence_vjp_trampoline<Dev, 0>);
  swap_in(t.recurrence_vjp[1], &recurrence_vjp_trampoline<Dev, 1>);
  swap_in(t.recurrence[2], &recurrence_trampoline<Dev, 2>);
  swap_in(t.recurrence[3], &recurrence_trampoline<Dev, 3>);
  swap_in(t.recurrence_vjp[2], &recurrence_vjp_trampoline<Dev, 2>);
  swap_in(t.recurrence_vjp[3], &recurrence_vjp_trampoline<Dev, 3>);
}

}  // namespace

void install_recurrence_capture(KernelTable& capturing, int device_kind) {
  if (device_kind == 0)
    install_capture<0>(capturing);
  else
    install_capture<1>(capturing);
}

void register_recurrence_ops(std::vector<const OpDef*>& ops) { ops.push_back(&op_linear_recurrence); }

}  // namespace tenax::detail

namespace tenax {

Tensor linear_recurrence(const Tensor& a, const Tensor& b, Name over) {
  Attrs attrs;
  attrs.axes = AxisList{over};
  return detail::apply(detail::op_linear_recurrence, a, b, attrs);
}

}  // namespace tenax
