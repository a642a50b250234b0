// Reductions over named axes: sum, mean, max, logsumexp. attrs.axes lists the reduced axes
// (the public API resolves "all axes" before the call, so a recorded call is explicit).
#include <cmath>
#include <limits>

#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/batching.h"

namespace tenax::detail {
namespace {

enum class Reduce { sum, mean, max, logsumexp };
constexpr const char* kNames[] = {"sum", "mean", "max", "logsumexp"};

Axes reduced_axes(const Tensor& x, const AxisList& axes, const char* op) {
  Axes out = x.axes();
  for (Name n : axes) {
    int i = out.index_of(n);
    if (i < 0)
      throw AxisError(std::string("[") + op + "] unknown axis '" + n.str() + "'; the tensor has axes " +
                      x.axes().describe());
    out.erase(i);
  }
  return out;
}

int64_t reduced_count(const Tensor& x, const AxisList& axes) {
  int64_t n = 1;
  for (Name a : axes) n *= x.size(a);
  return n;
}

// out (zero strides over reduced axes) op= x, looping over x's axes.
void reduce_into(Tensor& out, const Tensor& x, ElementwiseFn fn) {
  const Axes& ax = x.axes();
  LoopArg args[2] = {loop_arg(out, ax), loop_arg(x, ax)};
  fn(loop_dims(ax), args);
}

void scale_in_place(Tensor& t, double s) {
  LoopArg args[3] = {loop_arg(t, t.axes()), loop_arg(t, t.axes()), {}};
  args[2].data = &s;
  kernels(t.device()).scale[numeric_index(t.dtype(), "scale")](loop_dims(t.axes()), args);
}

template <Reduce R>
Tensor reduce_forward(Inputs in, const Attrs& a) {
  const char* name = kNames[int(R)];
  constexpr bool kSumLike = R == Reduce::sum || R == Reduce::mean;  // defined on complex numbers too
  if (kSumLike)
    check_numeric_operands(name, in);
  else
    check_float_operands(name, in);
  const Tensor& x = in[0];
  Axes out_axes = reduced_axes(x, a.axes, name);
  const KernelTable& k = kernels(x.device());
  const int fi = numeric_index(x.dtype(), name);
  // Only sum has a value over an empty axis (0); the numeric policy of docs/robustness.md.
  if (R != Reduce::sum && reduced_count(x, a.axes) == 0)
    throw ShapeError(std::string("[") + name + "] cannot reduce over an empty axis in " + x.axes().describe());
  if (R == Reduce::sum || R == Reduce::mean) {
    Tensor out = zeros(out_axes, x.dtype(), x.device());
    reduce_into(out, x, need(k.acc[fi], name, x.device()));
    if (R == Reduce::mean) scale_in_place(out, 1.0 / double(reduced_count(x, a.axes)));
    return out;
  }
  Tensor m = full(out_axes, -std::numeric_limits<double>::infinity(), x.dtype(), x.device());
  reduce_into(m, x, need(k.max_acc[fi], name, x.device()));
  if (R == Reduce::max) return m;
  // logsumexp = m + log Σ exp(x - m), with the Σ fused into one pass (dst += 1 * exp(x - m)).
  Tensor s = zeros(out_axes, x.dtype(), x.device());
  Tensor one = full(Axes{}, 1.0, x.dtype(), x.device());
  const Axes& ax = x.axes();
  LoopArg args[4] = {loop_arg(s, ax), loop_arg(one, ax), loop_arg(x, ax), loop_arg(m, ax)};
  k.deriv_acc[int(DerivOp::softmax)][fi](loop_dims(ax), args);
  LoopArg la[2] = {loop_arg(s, out_axes), loop_arg(s, out_axes)};
  k.unary[int(UnaryOp::log)][fi](loop_dims(out_axes), la);
  LoopArg aa[3] = {loop_arg(s, out_axes), loop_arg(s, out_axes), loop_arg(m, out_axes)};
  k.binary[int(BinaryOp::add)][fi](loop_dims(out_axes), aa);
  return s;
}

template <Reduce R>
void reduce_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  Tensor g = c.cotangent();
  if ((R == Reduce::sum || R == Reduce::mean) && c.lends()) {
    // The input's adjoint is the cotangent spread over the reduced axes: where it is the whole
    // adjoint, lent as a broadcast view (nothing written; sum(w * x) over 10^7 elements wrote
    // 80 MB here, read back once by the product's rule).
    Axes spread;
    const Axes& in = c.input_axes(0);
    bool apart = true;  // no reduced axis among the cotangent's (batch) axes
    for (Name a : c.attrs().axes) {
      spread.push_back(in[in.index_of(a)]);
      apart = apart && !g.axes().contains(a);
    }
    if (apart) {
      const Tensor scaled = R == Reduce::mean ? g * (1.0 / double(spread.numel())) : g;
      if (c.lend_adjoint(0, broadcast(scaled, spread))) return;
    }
  }
  // One pass over the adjoint's own axes: it covers every element once.
  bool assign = false;
  const Tensor& dst = c.adjoint_to_write(0, assign);
  const Axes& ax = dst.axes();
  const int fi = numeric_index(g.dtype(), "vjp");
  const KernelTable& k = kernels(g.device());
  if (R == Reduce::mean) g = g * (1.0 / double(reduced_count(dst, c.attrs().axes)));
  if (R == Reduce::sum || R == Reduce::mean) {
    LoopArg args[2] = {loop_arg(dst, ax), loop_arg(g, ax)};
    (assign ? k.copy[copy_index(g.dtype())] : k.acc[fi])(loop_dims(ax), args);
    return;
  }
  DerivOp d = R == Reduce::max ? DerivOp::argmax_mask : DerivOp::softmax;
  LoopArg args[4] = {loop_arg(dst, ax), loop_arg(g, ax), loop_arg(c.input(0), ax), loop_arg(c.output(), ax)};
  (assign ? k.deriv_set : k.deriv_acc)[int(d)][fi](loop_dims(ax), args);
}

template <Reduce R>
Tensor reduce_jvp(JvpContext& c) {
  const AxisList& axes = c.attrs().axes;
  const Tensor& t = c.tangent(0);
  switch (R) {
    case Reduce::sum: return sum(t, axes);
    case Reduce::mean: return mean(t, axes);
    case Reduce::max:
      return sum(where(equal(c.input(0), c.output()), t, zero_like(t)), axes);
    case Reduce::logsumexp: return sum(t * exp(c.input(0) - c.output()), axes);
  }
  return {};
}

template <Reduce R>
OpSample reduce_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  OpSample s{{random_values(rng, ax, dt, -2, 2)}, {}};
  Axes red = random_subset(rng, ax);
  if (red.rank() == 0) red.push_back(ax[0]);
  s.attrs.axes = red.names();
  return s;
}

constexpr uint32_t kSaveX = 1;
constexpr AttrSpec kReduceAttrs[] = {
    {"axes", AttrKind::names, "the axes reduced (omitted: every axis the tensor shows)", 0, false, 0, false, true}};
// The reductions differ in their rules (R) and in what max and logsumexp save: the input and output.
template <Reduce R>
constexpr OpDef reduce_op(const char* name, const char* doc) {
  const bool saves = R == Reduce::max || R == Reduce::logsumexp;
  return {.name = name,
          .arity = 1,
          .forward = reduce_forward<R>,
          .vjp = reduce_vjp<R>,
          .jvp = reduce_jvp<R>,
          .saves = saves ? kSaveX | kSaveOutput : 0u,
          .sample = reduce_sample<R>,
          .complex = R == Reduce::sum || R == Reduce::mean,
          .shard = R == Reduce::sum    ? ShardRule::sum
                   : R == Reduce::mean ? ShardRule::mean
                   : R == Reduce::max  ? ShardRule::max
                                       : ShardRule::logsumexp,
          .attrs = kReduceAttrs,
          .doc = doc};
}
const OpDef op_sum = reduce_op<Reduce::sum>("sum", "Σ over `axes` (0 over an empty axis)");
const OpDef op_mean = reduce_op<Reduce::mean>("mean", "the mean over `axes`");
const OpDef op_max =
    reduce_op<Reduce::max>("max", "the maximum over `axes` (the gradient reaches every element equal to it)");
const OpDef op_logsumexp = reduce_op<Reduce::logsumexp>("logsumexp", "log Σ exp over `axes`, computed stably");

Tensor reduce(const OpDef& op, const Tensor& x, const AxisList& axes) {
  Attrs a;
  a.axes = axes;
  return apply(op, x, a);
}

}  // namespace

void register_reduce_ops(std::vector<const OpDef*>& ops) {
  for (const OpDef* op : {&op_sum, &op_mean, &op_max, &op_logsumexp}) ops.push_back(op);
}

}  // namespace tenax::detail

namespace tenax {

namespace {
AxisList all_axes(const Tensor& x) { return visible_axes(x.axes(), detail::g_mapped); }
}  // namespace

Tensor sum(const Tensor& x) { return sum(x, all_axes(x)); }
Tensor sum(const Tensor& x, const AxisList& axes) { return detail::reduce(detail::op_sum, x, axes); }
Tensor mean(const Tensor& x) { return mean(x, all_axes(x)); }
Tensor mean(const Tensor& x, const AxisList& axes) { return detail::reduce(detail::op_mean, x, axes); }
Tensor max(const Tensor& x) { return max(x, all_axes(x)); }
Tensor max(const Tensor& x, const AxisList& axes) { return detail::reduce(detail::op_max, x, axes); }
Tensor logsumexp(const Tensor& x) { return logsumexp(x, all_axes(x)); }
Tensor logsumexp(const Tensor& x, const AxisList& axes) { return detail::reduce(detail::op_logsumexp, x, axes); }

}  // namespace tenax
