// where (select by a bool mask), comparisons (not differentiable) and astype (explicit dtype change).
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/batching.h"
#include "tenax/named/align.h"

namespace tenax::detail {
namespace {

// ---- where ----
Tensor where_forward(Inputs in, const Attrs&) {
  if (in[0].dtype() != DType::b8)
    throw DTypeError(std::string("[where] the condition must be bool, got ") + dtype_name(in[0].dtype()));
  check_numeric_operands("where", Inputs{in.p + 1, 2});
  Axes ax = align_axes(align_axes(in[0].axes(), in[1].axes(), "where", 0, 1), in[2].axes(), "where", 0, 2);
  Tensor out = empty(ax, in[1].dtype(), in[1].device());
  LoopArg args[4] = {loop_arg(out, ax), loop_arg(in[0], ax), loop_arg(in[1], ax), loop_arg(in[2], ax)};
  need(kernels(out.device()).where[numeric_index(out.dtype(), "where")], "where", out.device())(loop_dims(ax),
                                                                                               args);
  return out;
}

void where_vjp(VjpContext& c) {
  const Tensor& g = c.cotangent();
  const Tensor& cond = c.input(0);
  for (int side = 1; side <= 2; ++side) {
    if (!c.needs_grad(side)) continue;
    Tensor part = side == 1 ? where(cond, g, zero_like(g)) : where(cond, zero_like(g), g);
    const Tensor& dst = c.adjoint(side);
    accumulate(dst, part);
  }
}

Tensor where_jvp(JvpContext& c) {
  const Tensor& y = c.output();
  Tensor ta = c.tangent(1).defined() ? c.tangent(1) : zero_like(y);
  Tensor tb = c.tangent(2).defined() ? c.tangent(2) : zero_like(y);
  Tensor t = where(c.input(0), ta, tb);
  Axes missing;  // y's axes that neither tangent nor condition has
  for (int i = 0; i < y.rank(); ++i)
    if (!t.has_axis(y.axes().name(i))) missing.push_back(y.axes()[i]);
  t = broadcast(t, missing);
  // y's order, then any batch axes of batched tangents.
  return transpose(t, complete_order(t.axes(), y.axes().names(), batch_axes_of(t, y.axes()).names(), "where jvp"));
}

OpSample where_sample(SampleRng& rng, DType dt) {
  Axes base = random_axes(rng, 1 + int(rng() % 3));
  const DType r = real_dtype(dt);  // the condition from real values (complex numbers have no order)
  Tensor c = greater(random_values(rng, random_subset(rng, base), r, -1, 1), scalar(0.0, r));
  return {{c, random_values(rng, base, dt, -2, 2), random_values(rng, random_subset(rng, base), dt, -2, 2)}, {}};
}

const OpDef op_where = {.name = "where",
                        .arity = 3,
                        .forward = where_forward,
                        .vjp = where_vjp,
                        .jvp = where_jvp,
                        .saves = 1u,
                        .nondiff = 1u,
                        .sample = where_sample,
                        .complex = true,
                        .doc = "cond ? a : b elementwise (cond boolean, not differentiated)"};

// ---- comparisons ----
template <CompareOp C>
Tensor compare_forward(Inputs in, const Attrs&) {
  static const char* names[] = {"greater", "less", "equal"};
  const char* name = names[int(C)];
  check_float_operands(name, in);
  Axes ax = align_axes(in[0].axes(), in[1].axes(), name);
  Tensor out = empty(ax, DType::b8, in[0].device());
  LoopArg args[3] = {loop_arg(out, ax), loop_arg(in[0], ax), loop_arg(in[1], ax)};
  need(kernels(out.device()).compare[int(C)][float_index(in[0].dtype(), name)], name, out.device())(
      loop_dims(ax), args);
  return out;
}

OpSample compare_sample(SampleRng& rng, DType dt) {
  Axes base = random_axes(rng, 1 + int(rng() % 3));
  return {{random_values(rng, base, dt, -1, 1), random_values(rng, random_subset(rng, base), dt, -1, 1)}, {}};
}

// The comparisons differ only in their kernel and doc: boolean outputs, neither input differentiated.
constexpr OpDef compare_op(const char* name, Tensor (*forward)(Inputs, const Attrs&), const char* doc) {
  return {.name = name, .arity = 2, .forward = forward, .nondiff = 3u, .sample = compare_sample, .doc = doc};
}
const OpDef op_greater =
    compare_op("greater", compare_forward<CompareOp::greater>, "a > b elementwise, boolean (not differentiable)");
const OpDef op_less =
    compare_op("less", compare_forward<CompareOp::less>, "a < b elementwise, boolean (not differentiable)");
const OpDef op_equal =
    compare_op("equal", compare_forward<CompareOp::equal>, "a == b elementwise, boolean (not differentiable)");

// ---- astype: attrs.i[0] is the target DType ----
// out = fn(x) elementwise into a new tensor of dtype `to`.
Tensor convert(const Tensor& x, DType to, ElementwiseFn fn) {
  const Axes& ax = x.axes();
  Tensor out = empty(ax, to, x.device());
  LoopArg args[2] = {loop_arg(out, ax), loop_arg(x, ax)};
  need(fn, "astype", out.device())(loop_dims(ax), args);
  return out;
}

Tensor astype_forward(Inputs in, const Attrs& a) {
  const DType to = static_cast<DType>(a.i[0]);
  const DType from = in[0].dtype();
  (void)numeric_index(from, "astype");
  (void)numeric_index(to, "astype");
  if (from == to) return in[0];
  if (is_complex(from) && !is_complex(to))
    throw DTypeError(std::string("[astype] ") + dtype_name(from) + " -> " + dtype_name(to) +
                     " would drop the imaginary part; take real(z), imag(z) or abs(z) explicitly");
  const KernelTable& k = kernels(in[0].device());
  if (is_complex(from))
    return convert(in[0], to, to == DType::c64 ? k.complex.narrow : k.complex.widen);
  const DType part = real_dtype(to);  // real -> complex: to the parts' precision, then lifted
  const Tensor x = from == part ? in[0] : convert(in[0], part, part == DType::f32 ? k.cast_f64_f32 : k.cast_f32_f64);
  if (!is_complex(to)) return x;
  return convert(x, to, k.complex.from_real[part == DType::f64 ? 0 : 1]);
}

// A real input's adjoint takes the real part of a complex cotangent (docs/complex.md).
void astype_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  const Tensor& dst = c.adjoint(0);
  const Tensor& g = c.cotangent();
  accumulate(dst, astype(is_complex(g.dtype()) && !is_complex(dst.dtype()) ? real(g) : g, dst.dtype()));
}

Tensor astype_jvp(JvpContext& c) { return astype(c.tangent(0), c.output().dtype()); }

OpSample astype_sample(SampleRng& rng, DType dt) {
  OpSample s{{random_values(rng, random_axes(rng, 2), dt, -2, 2)}, {}};
  s.attrs.i[0] = static_cast<int64_t>(dt);  // same dtype: exact, so finite differences apply
  return s;
}

constexpr AttrSpec kAstypeAttrs[] = {
    {"dtype", AttrKind::dtype, "float64, float32, complex128 or complex64 (int64 and bool: not convertible)"}};
const OpDef op_astype = {.name = "astype",
                         .arity = 1,
                         .forward = astype_forward,
                         .vjp = astype_vjp,
                         .jvp = astype_jvp,
                         .sample = astype_sample,
                         .complex = true,
                         .attrs = kAstypeAttrs,
                         .doc = "converts to `dtype`"};

}  // namespace

void register_select_ops(std::vector<const OpDef*>& ops) {
  for (const OpDef* op : {&op_where, &op_greater, &op_less, &op_equal, &op_astype}) ops.push_back(op);
}

}  // namespace tenax::detail

namespace tenax {

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return detail::apply(detail::op_where, cond, a, b);
}
Tensor greater(const Tensor& a, const Tensor& b) { return detail::apply(detail::op_greater, a, b); }
Tensor less(const Tensor& a, const Tensor& b) { return detail::apply(detail::op_less, a, b); }
Tensor equal(const Tensor& a, const Tensor& b) { return detail::apply(detail::op_equal, a, b); }
Tensor astype(const Tensor& x, DType dtype) {
  Attrs a;
  a.i[0] = static_cast<int64_t>(dtype);
  return detail::apply(detail::op_astype, x, a);
}

}  // namespace tenax
