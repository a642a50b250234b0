// The ops that build a complex number or take one apart: complex(re, im), real, imag, conj, angle,
// and the complex form of abs (|z|, a real result; op abs runs it for complex inputs). Their rules
// follow the convention of docs/complex.md: a VJP is the adjoint of the JVP under the real inner
// product Re(conj(a) b), so the gradient of a real loss is dL/dRe z + i dL/dIm z.
#include "tenax/core/ops/complex.h"

#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/align.h"

namespace tenax::detail {
namespace {

int complex_index(DType t, const char* op) {
  if (!is_complex(t))
    throw DTypeError(std::string("[") + op + "] needs complex128 or complex64, got " + dtype_name(t));
  return t == DType::c128 ? 0 : 1;
}

// Runs one of the complex family's unary kernels from `in` (complex; a real one for from_real)
// into a new tensor of `to`.
Tensor run_part(ElementwiseFn (ComplexKernels::*row)[2], const Tensor& in, DType to, const char* op) {
  const int idx = row == &ComplexKernels::from_real ? float_index(in.dtype(), op) : complex_index(in.dtype(), op);
  const Axes& ax = in.axes();
  Tensor out = empty(ax, to, in.device());
  LoopArg args[2] = {loop_arg(out, ax), loop_arg(in, ax)};
  need((kernels(in.device()).complex.*row)[idx], op, in.device())(loop_dims(ax), args);
  return out;
}

// A real tensor as complex with imaginary part 0 (the same precision).
Tensor lift(const Tensor& x) { return run_part(&ComplexKernels::from_real, x, complex_dtype(x.dtype()), "complex"); }

// ---- complex(re, im) ----
Tensor make_forward(Inputs in, const Attrs&) {
  check_float_operands("complex", in);
  const Axes ax = align_axes(in[0].axes(), in[1].axes(), "complex");
  Tensor out = empty(ax, complex_dtype(in[0].dtype()), in[0].device());
  LoopArg args[3] = {loop_arg(out, ax), loop_arg(in[0], ax), loop_arg(in[1], ax)};
  need(kernels(out.device()).complex.make[float_index(in[0].dtype(), "complex")], "complex", out.device())(
      loop_dims(ax), args);
  return out;
}
void make_vjp(VjpContext& c) {
  if (c.needs_grad(0)) add_to_adjoint(c, 0, real(c.cotangent()));
  if (c.needs_grad(1)) add_to_adjoint(c, 1, imag(c.cotangent()));
}
Tensor make_jvp(JvpContext& c) {
  const Tensor& re = c.tangent(0);
  const Tensor& im = c.tangent(1);
  if (!im.defined()) return lift(re);
  if (!re.defined()) return complex(zero_like(im), im);
  return complex(re, im);
}
OpSample make_sample(SampleRng& rng, DType dt) {
  const DType r = real_dtype(dt);
  Axes base = random_axes(rng, 1 + int(rng() % 3));
  return {{random_values(rng, base, r, -2, 2), random_values(rng, random_subset(rng, base), r, -2, 2)}, {}};
}

// ---- real, imag, conj, angle ----
Tensor real_forward(Inputs in, const Attrs&) {
  return run_part(&ComplexKernels::real, in[0], real_dtype(in[0].dtype()), "real");
}
Tensor imag_forward(Inputs in, const Attrs&) {
  return run_part(&ComplexKernels::imag, in[0], real_dtype(in[0].dtype()), "imag");
}
Tensor conj_forward(Inputs in, const Attrs&) { return run_part(&ComplexKernels::conj, in[0], in[0].dtype(), "conj"); }
Tensor angle_forward(Inputs in, const Attrs&) {
  return run_part(&ComplexKernels::angle, in[0], real_dtype(in[0].dtype()), "angle");
}

// z̄ += (ȳ, 0); ẏ = Re ż.
void real_vjp(VjpContext& c) {
  if (c.needs_grad(0)) add_to_adjoint(c, 0, lift(c.cotangent()));
}
Tensor real_jvp(JvpContext& c) { return real(c.tangent(0)); }
// z̄ += (0, ȳ); ẏ = Im ż.
void imag_vjp(VjpContext& c) {
  if (c.needs_grad(0)) add_to_adjoint(c, 0, complex(zero_like(c.cotangent()), c.cotangent()));
}
Tensor imag_jvp(JvpContext& c) { return imag(c.tangent(0)); }
// z̄ += conj(ȳ); ẏ = conj(ż).
void conj_vjp(VjpContext& c) {
  if (c.needs_grad(0)) add_to_adjoint(c, 0, conj(c.cotangent()));
}
Tensor conj_jvp(JvpContext& c) { return conj(c.tangent(0)); }

// |z| where it is not 0, else 1: the divisor of the abs and angle rules (whose derivative at 0 is
// taken as 0, as abs's is for real numbers).
Tensor safe_modulus(const Tensor& modulus) {
  return where(greater(modulus, zero_like(modulus)), modulus, ones(Axes{}, modulus.dtype(), modulus.device()));
}

// angle: z̄ += ȳ · i z / |z|²; ẏ = Im(conj(z) ż) / |z|².
void angle_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  const Tensor& z = c.input(0);
  const Tensor m = safe_modulus(abs(z));
  const Tensor iz = complex(neg(imag(z)), real(z));
  add_to_adjoint(c, 0, mul(lift(div(c.cotangent(), mul(m, m))), iz));
}
Tensor angle_jvp(JvpContext& c) {
  const Tensor& z = c.input(0);
  const Tensor m = safe_modulus(abs(z));
  return div(imag(mul(conj(z), c.tangent(0))), mul(m, m));
}

OpSample complex_sample(SampleRng& rng, DType dt) {
  return {{random_values(rng, random_axes(rng, 1 + int(rng() % 3)), complex_dtype(dt), -2, 2)}, {}};
}
// angle: away from the branch cut on the negative real axis (real part > 0).
OpSample angle_sample(SampleRng& rng, DType dt) {
  return {{random_values(rng, random_axes(rng, 1 + int(rng() % 3)), complex_dtype(dt), 0.5, 2)}, {}};
}

const OpDef op_complex = {.name = "complex",
                          .arity = 2,
                          .forward = make_forward,
                          .vjp = make_vjp,
                          .jvp = make_jvp,
                          .sample = make_sample,
                          .attr_free = true,
                          .complex = true,
                          .doc = "re + i im from two real operands of one dtype (float64 -> complex128)"};
const OpDef op_real = {.name = "real",
                       .arity = 1,
                       .forward = real_forward,
                       .vjp = real_vjp,
                       .jvp = real_jvp,
                       .sample = complex_sample,
                       .attr_free = true,
                       .complex = true,
                       .doc = "the real part of a complex operand (a real result)"};
const OpDef op_imag = {.name = "imag",
                       .arity = 1,
                       .forward = imag_forward,
                       .vjp = imag_vjp,
                       .jvp = imag_jvp,
                       .sample = complex_sample,
                       .attr_free = true,
                       .complex = true,
                       .doc = "the imaginary part of a complex operand (a real result)"};
const OpDef op_conj = {.name = "conj",
                       .arity = 1,
                       .forward = conj_forward,
                       .vjp = conj_vjp,
                       .jvp = conj_jvp,
                       .sample = complex_sample,
                       .attr_free = true,
                       .complex = true,
                       .doc = "the complex conjugate"};
const OpDef op_angle = {.name = "angle",
                        .arity = 1,
                        .forward = angle_forward,
                        .vjp = angle_vjp,
                        .jvp = angle_jvp,
                        .saves = 1u,
                        .sample = angle_sample,
                        .attr_free = true,
                        .complex = true,
                        .doc = "the argument atan2(Im z, Re z) in (-pi, pi] (a real result)"};

}  // namespace

Tensor complex_abs_forward(const Tensor& z) { return run_part(&ComplexKernels::abs, z, real_dtype(z.dtype()), "abs"); }

// z̄ += ȳ · z / |z|; ẏ = Re(conj(z) ż) / |z|.
void complex_abs_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  const Tensor& z = c.input(0);
  add_to_adjoint(c, 0, mul(lift(div(c.cotangent(), safe_modulus(abs(z)))), z));
}
Tensor complex_abs_jvp(JvpContext& c) {
  const Tensor& z = c.input(0);
  return div(real(mul(conj(z), c.tangent(0))), safe_modulus(abs(z)));
}

Tensor as_complex(const Tensor& x) { return lift(x); }

void register_complex_ops(std::vector<const OpDef*>& ops) {
  for (const OpDef* op : {&op_complex, &op_real, &op_imag, &op_conj, &op_angle}) ops.push_back(op);
}

}  // namespace tenax::detail

namespace tenax {

Tensor complex(const Tensor& re, const Tensor& im) { return detail::apply(detail::op_complex, re, im); }
Tensor real(const Tensor& z) { return is_complex(z.dtype()) ? detail::apply(detail::op_real, z) : z; }
Tensor imag(const Tensor& z) {
  if (is_complex(z.dtype())) return detail::apply(detail::op_imag, z);
  (void)detail::float_index(z.dtype(), "imag");
  return zeros(z.axes(), z.dtype(), z.device());
}
Tensor conj(const Tensor& z) { return is_complex(z.dtype()) ? detail::apply(detail::op_conj, z) : z; }
Tensor angle(const Tensor& z) { return detail::apply(detail::op_angle, z); }

}  // namespace tenax
