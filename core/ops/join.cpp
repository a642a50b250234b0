// concat, stack and interleave along a named axis: each input is copied into a view of the output,
// and each input's adjoint receives the matching view of the cotangent.
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"

namespace tenax::detail {
namespace {

void check_inputs(const char* op, Inputs in) {
  if (in.n < 1) throw Error(std::string("[") + op + "] needs at least one tensor");
  check_numeric_operands(op, in);
}

// Axes without `axis` and without mapped axes, for comparing operands: inside nmap/map an input
// that lacks a mapped axis is the same for every slice (batching rule: broadcast it).
Axes without(const Axes& a, Name axis) {
  Axes r;
  for (int i = 0; i < a.rank(); ++i)
    if (a.name(i) != axis && !g_mapped.contains(a.name(i))) r.push_back(a[i]);
  return r;
}

// `base` plus the mapped axes some input has and base lacks.
Axes with_mapped(Axes base, Inputs in) {
  for (int k = 0; k < in.n; ++k)
    for (int i = 0; i < in[k].rank(); ++i) {
      Axis a = in[k].axes()[i];
      if (g_mapped.contains(a.name) && !base.contains(a.name)) base.push_back(a);
    }
  return base;
}

// ---- concat: attrs.axes = {axis} ----
Tensor concat_forward(Inputs in, const Attrs& a) {
  check_inputs("concat", in);
  const int n = in.n;
  const Name axis = a.axes[0];
  int64_t total = 0;
  const Axes rest = without(in[0].axes(), axis);
  for (int k = 0; k < n; ++k) {
    if (!in[k].has_axis(axis))
      throw AxisError("[concat] input " + std::to_string(k) + " " + in[k].axes().describe() + " lacks axis '" +
                      axis.str() + "'");
    if (!without(in[k].axes(), axis).same_set(rest))
      throw ShapeError("[concat] input " + std::to_string(k) + " " + in[k].axes().describe() +
                       " does not match input 0 " + in[0].axes().describe() + " apart from axis '" + axis.str() +
                       "'");
    if (__builtin_add_overflow(total, in[k].size(axis), &total))
      throw ShapeError("[concat] the sizes of axis '" + axis.str() + "' add up past int64");
  }
  Axes ax = with_mapped(in[0].axes(), in);
  try {
    ax.set_size(ax.index_of(axis), total);
  } catch (const ShapeError& e) {
    throw ShapeError("[concat] axis '" + axis.str() + "' of " + std::to_string(total) + " in " + e.what());
  }
  Tensor out = empty(ax, in[0].dtype(), in[0].device());
  int64_t off = 0;
  for (int k = 0; k < n; ++k) {
    const int64_t len = in[k].size(axis);
    copy_into(slice(out, axis, off, off + len), in[k]);
    off += len;
  }
  return out;
}

void concat_vjp(VjpContext& c) {
  const Name axis = c.attrs().axes[0];
  int64_t off = 0;
  for (int k = 0; k < c.num_inputs(); ++k) {
    const int64_t len = c.input_axes(k).size_of(axis);
    if (c.needs_grad(k)) {
      const Tensor& dst = c.adjoint(k);
      accumulate(dst, slice(c.cotangent(), axis, off, off + len));
    }
    off += len;
  }
}

// Tangents of every input, zeros (with the tangents' batch axes) where a tangent is absent.
std::vector<Tensor> dense_tangents(JvpContext& c) {
  Axes batch;
  for (int k = 0; k < c.num_inputs() && batch.rank() == 0; ++k)
    if (c.tangent(k).defined()) batch = batch_axes_of(c.tangent(k), c.input(k).axes());
  std::vector<Tensor> ts;
  for (int k = 0; k < c.num_inputs(); ++k)
    ts.push_back(c.tangent(k).defined()
                     ? c.tangent(k)
                     : zeros_with_batch(c.input(k).axes(), batch, c.input(k).dtype(), c.input(k).device()));
  return ts;
}

Tensor concat_jvp(JvpContext& c) { return concat(dense_tangents(c), c.attrs().axes[0]); }

OpSample concat_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  Name axis = ax.name(int(rng() % ax.rank()));
  OpSample s;
  const int n = 1 + int(rng() % 3);
  for (int k = 0; k < n; ++k) {
    Axes a = ax;
    a.set_size(a.index_of(axis), 1 + int64_t(rng() % 3));
    s.inputs.push_back(random_values(rng, a, dt, -1, 1));
  }
  s.attrs.axes = AxisList{axis};
  return s;
}

// ---- stack: attrs.axes = {new axis} ----
Tensor stack_forward(Inputs in, const Attrs& a) {
  check_inputs("stack", in);
  const int n = in.n;
  const Name axis = a.axes[0];
  if (in[0].has_axis(axis))
    throw AxisError("[stack] the new axis '" + axis.str() + "' is already in " + in[0].axes().describe());
  for (int k = 1; k < n; ++k)
    if (!without(in[k].axes(), axis).same_set(without(in[0].axes(), axis)))
      throw ShapeError("[stack] input " + std::to_string(k) + " " + in[k].axes().describe() +
                       " does not match input 0 " + in[0].axes().describe());
  Axes ax;
  ax.push_back({axis, n});
  const Axes rest = with_mapped(in[0].axes(), in);
  for (int i = 0; i < rest.rank(); ++i) ax.push_back(rest[i]);
  Tensor out = empty(ax, in[0].dtype(), in[0].device());
  for (int k = 0; k < n; ++k) copy_into(select(out, axis, k), in[k]);
  return out;
}

void stack_vjp(VjpContext& c) {
  const Name axis = c.attrs().axes[0];
  for (int k = 0; k < c.num_inputs(); ++k) {
    if (!c.needs_grad(k)) continue;
    const Tensor& dst = c.adjoint(k);
    accumulate(dst, select(c.cotangent(), axis, k));
  }
}

Tensor stack_jvp(JvpContext& c) { return stack(dense_tangents(c), c.attrs().axes[0]); }

OpSample stack_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  OpSample s;
  const int n = 1 + int(rng() % 3);
  for (int k = 0; k < n; ++k) s.inputs.push_back(random_values(rng, ax, dt, -1, 1));
  s.attrs.axes = AxisList{"z"};
  return s;
}

// ---- interleave: attrs.axes = {axis}; a at the even positions of the result, b at the odd ----
void check_interleave(Inputs in, Name axis) {
  check_inputs("interleave", in);
  for (int k = 0; k < 2; ++k)
    if (!in[k].has_axis(axis))
      throw AxisError("[interleave] input " + std::to_string(k) + " " + in[k].axes().describe() + " lacks axis '" +
                      axis.str() + "'");
  if (!without(in[1].axes(), axis).same_set(without(in[0].axes(), axis)))
    throw ShapeError("[interleave] input 1 " + in[1].axes().describe() + " does not match input 0 " +
                     in[0].axes().describe() + " apart from axis '" + axis.str() + "'");
  const int64_t na = in[0].size(axis), nb = in[1].size(axis);
  if (na != nb && na != nb + 1)
    throw ShapeError("[interleave] along '" + axis.str() + "' input 0 has " + std::to_string(na) + " and input 1 " +
                     std::to_string(nb) + " elements; input 0 takes the even positions, so it has as many or one more");
}

Tensor interleave_forward(Inputs in, const Attrs& a) {
  const Name axis = a.axes[0];
  check_interleave(in, axis);
  const int64_t total = in[0].size(axis) + in[1].size(axis);
  Axes ax = with_mapped(in[0].axes(), in);
  ax.set_size(ax.index_of(axis), total);
  Tensor out = empty(ax, in[0].dtype(), in[0].device());
  copy_into(slice(out, axis, 0, total, 2), in[0]);
  if (total > 1) copy_into(slice(out, axis, 1, total, 2), in[1]);
  return out;
}

void interleave_vjp(VjpContext& c) {
  const Name axis = c.attrs().axes[0];
  const Tensor& g = c.cotangent();
  const int64_t total = g.size(axis);
  for (int k = 0; k < 2; ++k)
    if (c.needs_grad(k) && total > k) accumulate(c.adjoint(k), slice(g, axis, k, total, 2));
}

Tensor interleave_jvp(JvpContext& c) {
  const std::vector<Tensor> t = dense_tangents(c);
  return interleave(t[0], t[1], c.attrs().axes[0]);
}

OpSample interleave_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  const Name axis = ax.name(int(rng() % ax.rank()));
  Axes a = ax, b = ax;
  const int64_t nb = 1 + int64_t(rng() % 3);
  a.set_size(a.index_of(axis), nb + int64_t(rng() % 2));
  b.set_size(b.index_of(axis), nb);
  OpSample s{{random_values(rng, a, dt, -1, 1), random_values(rng, b, dt, -1, 1)}, {}};
  s.attrs.axes = AxisList{axis};
  return s;
}

// Variadic: the JVP needs the inputs for their axes when a tangent is zero; the VJP needs none.
constexpr AttrSpec kConcatAttrs[] = {{"axis", AttrKind::name, "the axis joined along (every input has it)"}};
const OpDef op_concat = {.name = "concat",
                         .arity = -1,
                         .forward = concat_forward,
                         .vjp = concat_vjp,
                         .jvp = concat_jvp,
                         .sample = concat_sample,
                         .complex = true,
                         .attrs = kConcatAttrs,
                         .doc = "joins the inputs along `axis`; every other axis agrees by name and size"};
constexpr AttrSpec kStackAttrs[] = {{"axis", AttrKind::name, "the new outermost axis", 0, true, 0, true}};
const OpDef op_stack = {.name = "stack",
                        .arity = -1,
                        .forward = stack_forward,
                        .vjp = stack_vjp,
                        .jvp = stack_jvp,
                        .sample = stack_sample,
                        .complex = true,
                        .attrs = kStackAttrs,
                        .doc = "stacks inputs with equal axes along a new outermost `axis`"};

constexpr AttrSpec kInterleaveAttrs[] = {{"axis", AttrKind::name, "the axis interleaved along (both inputs have it)"}};
const OpDef op_interleave = {.name = "interleave",
                             .arity = 2,
                             .forward = interleave_forward,
                             .vjp = interleave_vjp,
                             .jvp = interleave_jvp,
                             .sample = interleave_sample,
                             .complex = true,
                             .attrs = kInterleaveAttrs,
                             .doc = "a at the even and b at the odd positions along `axis` (a has as many elements "
                                    "as b, or one more)"};

Tensor join(const OpDef& op, const std::vector<Tensor>& xs, Name axis) {
  Attrs a;
  a.axes = AxisList{axis};
  return apply(op, xs, a);
}

}  // namespace

void register_join_ops(std::vector<const OpDef*>& ops) {
  ops.push_back(&op_concat);
  ops.push_back(&op_stack);
  ops.push_back(&op_interleave);
}

}  // namespace tenax::detail

namespace tenax {

Tensor concat(const std::vector<Tensor>& xs, Name axis) { return detail::join(detail::op_concat, xs, axis); }
Tensor stack(const std::vector<Tensor>& xs, Name axis) { return detail::join(detail::op_stack, xs, axis); }
Tensor interleave(const Tensor& a, const Tensor& b, Name axis) { return detail::join(detail::op_interleave, {a, b}, axis); }

}  // namespace tenax
