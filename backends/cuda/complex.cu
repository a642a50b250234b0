// CUDA kernels of the complex dtypes (cuda::std::complex, laid out as std::complex): the
// elementwise ops defined on complex numbers and their derivative rules in both forms (VJP:
// g * conj(D), JVP: g * D; docs/complex.md) and the kernels that build a complex number or take one
// apart (copies, sums, fills, scaling and select on complex numbers: elementwise.cu's kernels).
// Contractions, recurrences and the linear algebra of complex operands are host-only (a
// DeviceError on a GPU).
#include <cuda/std/complex>
#include <cuda_runtime.h>

#include <type_traits>

#include "tenax/backends/cuda/loop.cuh"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

template <class R>
using Cx = ::cuda::std::complex<R>;

// ---- forward ----
struct Neg { template <class C> __device__ C operator()(C x) const { return -x; } };
struct Square { template <class C> __device__ C operator()(C x) const { return x * x; } };
struct Exp { template <class C> __device__ C operator()(C x) const { return ::cuda::std::exp(x); } };
struct Log { template <class C> __device__ C operator()(C x) const { return ::cuda::std::log(x); } };
struct Sqrt { template <class C> __device__ C operator()(C x) const { return ::cuda::std::sqrt(x); } };
struct Tanh { template <class C> __device__ C operator()(C x) const { return ::cuda::std::tanh(x); } };
struct Add { template <class C> __device__ C operator()(C a, C b) const { return a + b; } };
struct Sub { template <class C> __device__ C operator()(C a, C b) const { return a - b; } };
struct Mul { template <class C> __device__ C operator()(C a, C b) const { return a * b; } };
struct Div { template <class C> __device__ C operator()(C a, C b) const { return a / b; } };
struct Pow { template <class C> __device__ C operator()(C a, C b) const { return ::cuda::std::pow(a, b); } };

// ---- derivatives D(x, y) / D(a, b, y): the complex derivatives of the holomorphic ops ----
struct DNeg { template <class C> __device__ C operator()(C, C) const { return C(-1); } };
struct DSquare { template <class C> __device__ C operator()(C x, C) const { return C(2) * x; } };
struct DExp { template <class C> __device__ C operator()(C, C y) const { return y; } };
struct DLog { template <class C> __device__ C operator()(C x, C) const { return C(1) / x; } };
struct DSqrt { template <class C> __device__ C operator()(C, C y) const { return C(0.5) / y; } };
struct DTanh { template <class C> __device__ C operator()(C, C y) const { return C(1) - y * y; } };
struct DOne2 { template <class C> __device__ C operator()(C, C, C) const { return C(1); } };
struct DMinusOne2 { template <class C> __device__ C operator()(C, C, C) const { return C(-1); } };
struct DMulA { template <class C> __device__ C operator()(C, C b, C) const { return b; } };
struct DMulB { template <class C> __device__ C operator()(C a, C, C) const { return a; } };
struct DDivA { template <class C> __device__ C operator()(C, C b, C) const { return C(1) / b; } };
struct DDivB { template <class C> __device__ C operator()(C, C b, C y) const { return -y / b; } };
struct DPowA { template <class C> __device__ C operator()(C a, C b, C) const { return b * ::cuda::std::pow(a, b - C(1)); } };
struct DPowB {
  template <class C>
  __device__ C operator()(C a, C, C y) const { return a == C(0) ? C(0) : y * ::cuda::std::log(a); }
};

// g * D or g * conj(D) over (g, x, y) or (g, a, b, y).
template <class D, bool kConj>
struct Rule3 {
  template <class C>
  __device__ C operator()(C g, C x, C y) const {
    const C d = D{}(x, y);
    return g * (kConj ? ::cuda::std::conj(d) : d);
  }
};
template <class D, bool kConj>
struct Rule4 {
  template <class C>
  __device__ C operator()(C g, C a, C b, C y) const {
    const C d = D{}(a, b, y);
    return g * (kConj ? ::cuda::std::conj(d) : d);
  }
};

// ---- parts ----
struct Make { template <class R> __device__ Cx<R> operator()(R re, R im) const { return Cx<R>(re, im); } };
struct RealPart { template <class R> __device__ R operator()(Cx<R> z) const { return z.real(); } };
struct ImagPart { template <class R> __device__ R operator()(Cx<R> z) const { return z.imag(); } };
struct Conj { template <class C> __device__ C operator()(C z) const { return ::cuda::std::conj(z); } };
struct Modulus { template <class R> __device__ R operator()(Cx<R> z) const { return ::cuda::std::abs(z); } };
struct Arg { template <class R> __device__ R operator()(Cx<R> z) const { return ::cuda::std::arg(z); } };
struct Lift { template <class R> __device__ Cx<R> operator()(R x) const { return Cx<R>(x, R(0)); } };
template <class To>
struct Convert { template <class From> __device__ To operator()(From z) const { return To(z); } };

// ---- host entry points (ElementwiseFn) ----
template <class F, class C>
void unary(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, F, C, C>(d, a, F{}, "elementwise");
}
template <class F, class C>
void binary(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, F, C, C, C>(d, a, F{}, "elementwise");
}
template <class F, class Out, class In>
void part(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, F, Out, In>(d, a, F{}, "complex");
}
template <class C>
void make(const LoopDims& d, const LoopArg* a) {
  using R = typename C::value_type;
  launch<Put::assign, Make, C, R, R>(d, a, Make{}, "complex");
}
// Both forms (VJP into deriv_*[2 + dt], JVP into complex.tangent_*[dt]) of a derivative rule over
// (g, x, y) (kArity 3) or (g, a, b, y) (kArity 4): the loops of loop.cuh's `rule`.
template <int kArity, class D, class C>
void rule_entries(KernelTable& t, DerivOp op, int dt) {
  using Vjp = std::conditional_t<kArity == 3, Rule3<D, true>, Rule4<D, true>>;
  using Jvp = std::conditional_t<kArity == 3, Rule3<D, false>, Rule4<D, false>>;
  t.deriv_acc[int(op)][2 + dt] = rule<Vjp, C, true, kArity + 1>;
  t.deriv_set[int(op)][2 + dt] = rule<Vjp, C, false, kArity + 1>;
  t.complex.tangent_acc[int(op)][dt] = rule<Jvp, C, true, kArity + 1>;
  t.complex.tangent_set[int(op)][dt] = rule<Jvp, C, false, kArity + 1>;
}

template <class R, int dt>
void register_dtype(KernelTable& t) {
  using C = Cx<R>;
  t.unary[int(UnaryOp::neg)][2 + dt] = unary<Neg, C>;
  t.unary[int(UnaryOp::square)][2 + dt] = unary<Square, C>;
  t.unary[int(UnaryOp::exp)][2 + dt] = unary<Exp, C>;
  t.unary[int(UnaryOp::log)][2 + dt] = unary<Log, C>;
  t.unary[int(UnaryOp::sqrt)][2 + dt] = unary<Sqrt, C>;
  t.unary[int(UnaryOp::tanh)][2 + dt] = unary<Tanh, C>;
  t.binary[int(BinaryOp::add)][2 + dt] = binary<Add, C>;
  t.binary[int(BinaryOp::sub)][2 + dt] = binary<Sub, C>;
  t.binary[int(BinaryOp::mul)][2 + dt] = binary<Mul, C>;
  t.binary[int(BinaryOp::div)][2 + dt] = binary<Div, C>;
  t.binary[int(BinaryOp::pow)][2 + dt] = binary<Pow, C>;
  rule_entries<3, DNeg, C>(t, DerivOp::unary_neg, dt);
  rule_entries<3, DSquare, C>(t, DerivOp::unary_square, dt);
  rule_entries<3, DExp, C>(t, DerivOp::unary_exp, dt);
  rule_entries<3, DLog, C>(t, DerivOp::unary_log, dt);
  rule_entries<3, DSqrt, C>(t, DerivOp::unary_sqrt, dt);
  rule_entries<3, DTanh, C>(t, DerivOp::unary_tanh, dt);
  for (DerivOp op : {DerivOp::add_a, DerivOp::add_b, DerivOp::sub_a}) rule_entries<4, DOne2, C>(t, op, dt);
  rule_entries<4, DMinusOne2, C>(t, DerivOp::sub_b, dt);
  rule_entries<4, DMulA, C>(t, DerivOp::mul_a, dt);
  rule_entries<4, DMulB, C>(t, DerivOp::mul_b, dt);
  rule_entries<4, DDivA, C>(t, DerivOp::div_a, dt);
  rule_entries<4, DDivB, C>(t, DerivOp::div_b, dt);
  rule_entries<4, DPowA, C>(t, DerivOp::pow_a, dt);
  rule_entries<4, DPowB, C>(t, DerivOp::pow_b, dt);
  ComplexKernels& c = t.complex;
  c.make[dt] = make<C>;
  c.real[dt] = part<RealPart, R, C>;
  c.imag[dt] = part<ImagPart, R, C>;
  c.conj[dt] = part<Conj, C, C>;
  c.abs[dt] = part<Modulus, R, C>;
  c.angle[dt] = part<Arg, R, C>;
  c.from_real[dt] = part<Lift, C, R>;
}

}  // namespace

void register_complex(KernelTable& t) {
  register_dtype<double, 0>(t);
  register_dtype<float, 1>(t);
  t.complex.narrow = part<Convert<Cx<float>>, Cx<float>, Cx<double>>;
  t.complex.widen = part<Convert<Cx<double>>, Cx<double>, Cx<float>>;
}

}  // namespace tenax::detail::cuda
