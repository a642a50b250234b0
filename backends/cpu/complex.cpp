// CPU kernels of the complex dtypes (complex128, complex64): the elementwise ops defined on complex
// numbers, their derivative rules in both forms (VJP: dst (+)= g * conj(D); JVP: dst (+)= g * D;
// docs/complex.md), data movement, and the kernels that build a complex number or take one apart.
// Each registers its flat and scalar twins (loop.h), so captured steps replay them like the real ones.
#include <cmath>
#include <complex>

#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/register.h"

namespace tenax::cpu {
namespace {

using detail::DerivOp;
using detail::LoopArg;
using detail::LoopDims;

template <class C>
using Part = typename C::value_type;

// ---- forward ----
template <class C> struct Neg { void operator()(C& y, C x) const { y = -x; } };
template <class C> struct Square { void operator()(C& y, C x) const { y = x * x; } };
template <class C> struct Exp { void operator()(C& y, C x) const { y = std::exp(x); } };
template <class C> struct Log { void operator()(C& y, C x) const { y = std::log(x); } };
template <class C> struct Sqrt { void operator()(C& y, C x) const { y = std::sqrt(x); } };
template <class C> struct Tanh { void operator()(C& y, C x) const { y = std::tanh(x); } };
template <class C> struct Add { void operator()(C& y, C a, C b) const { y = a + b; } };
template <class C> struct Sub { void operator()(C& y, C a, C b) const { y = a - b; } };
template <class C> struct Mul { void operator()(C& y, C a, C b) const { y = a * b; } };
template <class C> struct Div { void operator()(C& y, C a, C b) const { y = a / b; } };
template <class C> struct Pow { void operator()(C& y, C a, C b) const { y = std::pow(a, b); } };

// ---- derivatives D(x, y) / D(a, b, y), as the complex derivative of each holomorphic op ----
struct DNeg { template <class C> C operator()(C, C) const { return C(-1); } };
struct DSquare { template <class C> C operator()(C x, C) const { return C(2) * x; } };
struct DExp { template <class C> C operator()(C, C y) const { return y; } };
struct DLog { template <class C> C operator()(C x, C) const { return C(1) / x; } };
struct DSqrt { template <class C> C operator()(C, C y) const { return C(0.5) / y; } };
struct DTanh { template <class C> C operator()(C, C y) const { return C(1) - y * y; } };
struct DOne2 { template <class C> C operator()(C, C, C) const { return C(1); } };
struct DMinusOne2 { template <class C> C operator()(C, C, C) const { return C(-1); } };
struct DMulA { template <class C> C operator()(C, C b, C) const { return b; } };
struct DMulB { template <class C> C operator()(C a, C, C) const { return a; } };
struct DDivA { template <class C> C operator()(C, C b, C) const { return C(1) / b; } };
struct DDivB { template <class C> C operator()(C, C b, C y) const { return -y / b; } };
struct DPowA { template <class C> C operator()(C a, C b, C) const { return b * std::pow(a, b - C(1)); } };
// The principal branch: y log a; 0 at a = 0 (where y is 0 or not finite), as for real numbers.
struct DPowB { template <class C> C operator()(C a, C, C y) const { return a == C(0) ? C(0) : y * std::log(a); } };

// dst (+)= g * D or g * conj(D), from D over one operand pair (x, y) or triple (a, b, y).
template <bool kAcc, class C>
inline void put(C& dst, C v) {
  if constexpr (kAcc)
    dst += v;
  else
    dst = v;
}
template <class D, class C, bool kAcc, bool kConj>
struct Unary {
  void operator()(C& dst, C g, C x, C y) const {
    const C d = D{}(x, y);
    put<kAcc>(dst, g * (kConj ? std::conj(d) : d));
  }
};
template <class D, class C, bool kAcc, bool kConj>
struct Binary {
  void operator()(C& dst, C g, C a, C b, C y) const {
    const C d = D{}(a, b, y);
    put<kAcc>(dst, g * (kConj ? std::conj(d) : d));
  }
};
template <class C, bool kAcc>
struct One {
  void operator()(C& dst, C g) const { put<kAcc>(dst, g); }
};

// Absent residual operands of the strided forms read a zero.
template <class C>
void fill_missing(LoopArg* a, int n) {
  static const C zero = C(0);
  for (int i = 0; i < n; ++i)
    if (!a[i].data) {
      a[i].data = const_cast<C*>(&zero);
      for (int64_t& s : a[i].strides) s = 0;
    }
}
template <class F, class C, int kArity>
struct Deriv {
  static void run(const LoopDims& d, const LoopArg* in) {
    LoopArg a[kArity];
    for (int i = 0; i < kArity; ++i) a[i] = in[i];
    fill_missing<C>(a + 2, kArity - 2);
    if constexpr (kArity == 2) for_each<C, C>(d, a, F{});
    else if constexpr (kArity == 4) for_each<C, C, C, C>(d, a, F{});
    else for_each<C, C, C, C, C>(d, a, F{});
  }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) {
    if constexpr (kArity == 2) for_flat<C, C>(outer, n, a, F{});
    else if constexpr (kArity == 4) for_flat<C, C, C, C>(outer, n, a, F{});
    else for_flat<C, C, C, C, C>(outer, n, a, F{});
  }
  static void one(void* const* p) {
    if constexpr (kArity == 2) for_one<C, C>(p, F{});
    else if constexpr (kArity == 4) for_one<C, C, C, C>(p, F{});
    else for_one<C, C, C, C, C>(p, F{});
  }
  static void into(detail::KernelTable& t, detail::ElementwiseFn& entry) { t.set(entry, &run, &flat, &one); }
};

// The four forms (VJP/JVP, accumulate/write) of derivative `op` for both complex dtypes.
template <template <class, bool, bool> class F, int kArity>
void deriv_entry(detail::KernelTable& t, DerivOp op) {
  auto one = [&](auto tag, int dt) {
    using C = decltype(tag);
    Deriv<F<C, true, true>, C, kArity>::into(t, t.deriv_acc[int(op)][2 + dt]);
    Deriv<F<C, false, true>, C, kArity>::into(t, t.deriv_set[int(op)][2 + dt]);
    Deriv<F<C, true, false>, C, kArity>::into(t, t.complex.tangent_acc[int(op)][dt]);
    Deriv<F<C, false, false>, C, kArity>::into(t, t.complex.tangent_set[int(op)][dt]);
  };
  one(std::complex<double>{}, 0);
  one(std::complex<float>{}, 1);
}
template <class D>
struct UnaryOf {
  template <class C, bool kAcc, bool kConj>
  using F = Unary<D, C, kAcc, kConj>;
};
template <class D>
struct BinaryOf {
  template <class C, bool kAcc, bool kConj>
  using F = Binary<D, C, kAcc, kConj>;
};
template <class C, bool kAcc, bool>
using OneOf = One<C, kAcc>;

// ---- data movement and parts ----
template <class C> struct Copy { void operator()(C& y, C x) const { y = x; } };
template <class C> struct AddInto {
  static constexpr bool kSumReduction = true;
  void operator()(C& y, C x) const { y += x; }
};
template <class C> struct Where { void operator()(C& y, bool c, C p, C q) const { y = c ? p : q; } };
template <class C> struct Make { void operator()(C& y, Part<C> re, Part<C> im) const { y = C(re, im); } };
template <class C> struct Real { void operator()(Part<C>& y, C x) const { y = x.real(); } };
template <class C> struct Imag { void operator()(Part<C>& y, C x) const { y = x.imag(); } };
template <class C> struct Conj { void operator()(C& y, C x) const { y = std::conj(x); } };
template <class C> struct Abs { void operator()(Part<C>& y, C x) const { y = std::abs(x); } };
template <class C> struct Angle { void operator()(Part<C>& y, C x) const { y = std::arg(x); } };
template <class C> struct FromReal { void operator()(C& y, Part<C> x) const { y = C(x, Part<C>(0)); } };
template <class To, class From> struct Convert { void operator()(To& y, From x) const { y = To(x); } };

// The kernels with a real scalar operand (a double): args[2] for scale, args[1] for fill.
template <class C>
struct Scale {
  static C factor(const void* p) { return C(static_cast<Part<C>>(*static_cast<const double*>(p))); }
  static void run(const LoopDims& d, const LoopArg* a) {
    const C s = factor(a[2].data);
    for_each<C, C>(d, a, [s](C& y, C x) { y = x * s; });
  }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) {
    const C s = factor(a[2].data);
    for_flat<C, C>(outer, n, a, [s](C& y, C x) { y = x * s; });
  }
  static void one(void* const* p) { *static_cast<C*>(p[0]) = *static_cast<const C*>(p[1]) * factor(p[2]); }
};
template <class C>
struct Fill {
  static C value(const void* p) { return C(static_cast<Part<C>>(*static_cast<const double*>(p))); }
  static void run(const LoopDims& d, const LoopArg* a) {
    const C v = value(a[1].data);
    for_each<C>(d, a, [v](C& y) { y = v; });
  }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) {
    const C v = value(a[1].data);
    for_flat<C>(outer, n, a, [v](C& y) { y = v; });
  }
  static void one(void* const* p) { *static_cast<C*>(p[0]) = value(p[1]); }
};

template <class C, int dt>
void register_dtype(detail::KernelTable& t) {
  using R = Part<C>;
  using detail::BinaryOp;
  using detail::UnaryOp;
  Kernel<Neg<C>, C, C>::into(t, t.unary[int(UnaryOp::neg)][2 + dt]);
  Kernel<Square<C>, C, C>::into(t, t.unary[int(UnaryOp::square)][2 + dt]);
  Kernel<Exp<C>, C, C>::into(t, t.unary[int(UnaryOp::exp)][2 + dt]);
  Kernel<Log<C>, C, C>::into(t, t.unary[int(UnaryOp::log)][2 + dt]);
  Kernel<Sqrt<C>, C, C>::into(t, t.unary[int(UnaryOp::sqrt)][2 + dt]);
  Kernel<Tanh<C>, C, C>::into(t, t.unary[int(UnaryOp::tanh)][2 + dt]);
  Kernel<Add<C>, C, C, C>::into(t, t.binary[int(BinaryOp::add)][2 + dt]);
  Kernel<Sub<C>, C, C, C>::into(t, t.binary[int(BinaryOp::sub)][2 + dt]);
  Kernel<Mul<C>, C, C, C>::into(t, t.binary[int(BinaryOp::mul)][2 + dt]);
  Kernel<Div<C>, C, C, C>::into(t, t.binary[int(BinaryOp::div)][2 + dt]);
  Kernel<Pow<C>, C, C, C>::into(t, t.binary[int(BinaryOp::pow)][2 + dt]);
  Kernel<Copy<C>, C, C>::into(t, t.copy[4 + dt]);
  Kernel<AddInto<C>, C, C>::into(t, t.acc[2 + dt]);
  Kernel<Where<C>, C, bool, C, C>::into(t, t.where[2 + dt]);
  t.set(t.scale[2 + dt], &Scale<C>::run, &Scale<C>::flat, &Scale<C>::one);
  t.set(t.fill[2 + dt], &Fill<C>::run, &Fill<C>::flat, &Fill<C>::one);
  detail::ComplexKernels& c = t.complex;
  Kernel<Make<C>, C, R, R>::into(t, c.make[dt]);
  Kernel<Real<C>, R, C>::into(t, c.real[dt]);
  Kernel<Imag<C>, R, C>::into(t, c.imag[dt]);
  Kernel<Conj<C>, C, C>::into(t, c.conj[dt]);
  Kernel<Abs<C>, R, C>::into(t, c.abs[dt]);
  Kernel<Angle<C>, R, C>::into(t, c.angle[dt]);
  Kernel<FromReal<C>, C, R>::into(t, c.from_real[dt]);
}

}  // namespace

void register_complex(detail::KernelTable& t) {
  register_dtype<std::complex<double>, 0>(t);
  register_dtype<std::complex<float>, 1>(t);
  using C128 = std::complex<double>;
  using C64 = std::complex<float>;
  Kernel<Convert<C64, C128>, C64, C128>::into(t, t.complex.narrow);
  Kernel<Convert<C128, C64>, C128, C64>::into(t, t.complex.widen);
  deriv_entry<UnaryOf<DNeg>::F, 4>(t, DerivOp::unary_neg);
  deriv_entry<UnaryOf<DSquare>::F, 4>(t, DerivOp::unary_square);
  deriv_entry<UnaryOf<DExp>::F, 4>(t, DerivOp::unary_exp);
  deriv_entry<UnaryOf<DLog>::F, 4>(t, DerivOp::unary_log);
  deriv_entry<UnaryOf<DSqrt>::F, 4>(t, DerivOp::unary_sqrt);
  deriv_entry<UnaryOf<DTanh>::F, 4>(t, DerivOp::unary_tanh);
  deriv_entry<BinaryOf<DOne2>::F, 5>(t, DerivOp::add_a);
  deriv_entry<BinaryOf<DOne2>::F, 5>(t, DerivOp::add_b);
  deriv_entry<BinaryOf<DOne2>::F, 5>(t, DerivOp::sub_a);
  deriv_entry<BinaryOf<DMinusOne2>::F, 5>(t, DerivOp::sub_b);
  deriv_entry<BinaryOf<DMulA>::F, 5>(t, DerivOp::mul_a);
  deriv_entry<BinaryOf<DMulB>::F, 5>(t, DerivOp::mul_b);
  deriv_entry<BinaryOf<DDivA>::F, 5>(t, DerivOp::div_a);
  deriv_entry<BinaryOf<DDivB>::F, 5>(t, DerivOp::div_b);
  deriv_entry<BinaryOf<DPowA>::F, 5>(t, DerivOp::pow_a);
  deriv_entry<BinaryOf<DPowB>::F, 5>(t, DerivOp::pow_b);
  deriv_entry<OneOf, 2>(t, DerivOp::one);
}

}  // namespace tenax::cpu
