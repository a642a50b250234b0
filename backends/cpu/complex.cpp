// CPU kernels of the complex dtypes (complex128, complex64): the elementwise ops defined on complex
// numbers, their derivative rules in both forms (VJP: dst (+)= g * conj(D); JVP: dst (+)= g * D;
// docs/complex.md) and the kernels that build a complex number or take one apart (copies, sums,
// fills and select on complex numbers: backends/cpu/memory.cpp).
// Each registers its flat and scalar twins (loop.h), so captured steps replay them like the real ones.
#include <cmath>
#include <complex>
#include <tuple>
#include <type_traits>

#include "tenax/backends/cpu/complex_rows.h"
#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/product.h"
#include "tenax/backends/cpu/register.h"

namespace tenax::cpu {
namespace {

using detail::DerivOp;

template <class C>
using Part = typename C::value_type;

// ---- forward ----
template <class C> struct Neg { void operator()(C& y, C x) const { y = -x; } };
template <class C> struct Square { void operator()(C& y, C x) const { y = prod(x, x); } };
template <class C> struct Exp { void operator()(C& y, C x) const { y = std::exp(x); } };
template <class C> struct Log { void operator()(C& y, C x) const { y = std::log(x); } };
template <class C> struct Sqrt { void operator()(C& y, C x) const { y = std::sqrt(x); } };
template <class C> struct Tanh { void operator()(C& y, C x) const { y = std::tanh(x); } };
template <class C> struct Add { void operator()(C& y, C a, C b) const { y = a + b; } };
template <class C> struct Sub { void operator()(C& y, C a, C b) const { y = a - b; } };
template <class C> struct Mul {
  void operator()(C& y, C a, C b) const { y = prod(a, b); }
  static constexpr bool kRows = true;
  static int64_t rows(int64_t n, std::tuple<C*, C*, C*> p, const int64_t* s) {
    return complex_product_rows(n, std::get<0>(p), s[0], std::get<1>(p), s[1], std::get<2>(p), s[2], 0);
  }
};
template <class C> struct Div { void operator()(C& y, C a, C b) const { y = a / b; } };
template <class C> struct Pow { void operator()(C& y, C a, C b) const { y = std::pow(a, b); } };

// ---- derivatives D(x, y) / D(a, b, y), as the complex derivative of each holomorphic op ----
struct DNeg { template <class C> C operator()(C, C) const { return C(-1); } };
struct DSquare { template <class C> C operator()(C x, C) const { return x + x; } };
struct DExp { template <class C> C operator()(C, C y) const { return y; } };
struct DLog { template <class C> C operator()(C x, C) const { return C(1) / x; } };
struct DSqrt { template <class C> C operator()(C, C y) const { return C(0.5) / y; } };
struct DTanh { template <class C> C operator()(C, C y) const { return C(1) - prod(y, y); } };
struct DMulA { template <class C> C operator()(C, C b, C) const { return b; } };
struct DMulB { template <class C> C operator()(C a, C, C) const { return a; } };
struct DDivA { template <class C> C operator()(C, C b, C) const { return C(1) / b; } };
struct DDivB { template <class C> C operator()(C, C b, C y) const { return -y / b; } };
struct DPowA { template <class C> C operator()(C a, C b, C) const { return prod(b, std::pow(a, b - C(1))); } };
// The principal branch: y log a; 0 at a = 0 (where y is 0 or not finite), as for real numbers.
struct DPowB { template <class C> C operator()(C a, C, C y) const { return a == C(0) ? C(0) : prod(y, std::log(a)); } };

// dst (+)= g * D or g * conj(D), from D over one operand pair (x, y) or triple (a, b, y).
template <class D, class C, bool kAcc, bool kConj>
struct Unary {
  void operator()(C& dst, C g, C x, C y) const {
    const C d = D{}(x, y);
    put<kAcc>(dst, kConj ? prod_conj(g, d) : prod(g, d));
  }
};
// mul's rules take D from one operand (b for a's, a for b's): their rows are products.
template <class D>
inline constexpr int kFactorOperand = 0;
template <>
inline constexpr int kFactorOperand<DMulA> = 3;
template <>
inline constexpr int kFactorOperand<DMulB> = 2;
template <class D, class C, bool kAcc, bool kConj>
struct Binary {
  void operator()(C& dst, C g, C a, C b, C y) const {
    const C d = D{}(a, b, y);
    put<kAcc>(dst, kConj ? prod_conj(g, d) : prod(g, d));
  }
  static constexpr bool kRows = kFactorOperand<D> != 0;  // loop.h calls rows() only then
  static int64_t rows(int64_t n, std::tuple<C*, C*, C*, C*, C*> p, const int64_t* s) {
    constexpr int k = kFactorOperand<D>;
    const int form = (kAcc ? kComplexAccumulate : 0) | (kConj ? kComplexConjugate : 0);
    return complex_product_rows(n, std::get<0>(p), s[0], std::get<1>(p), s[1], std::get<k>(p), s[k], form);
  }
};
// D = 1 and D = -1 (add, sub): the cotangent or tangent itself, with no product.
template <class C, bool kAcc, bool>
struct Pass2 {
  void operator()(C& dst, C g, C, C, C) const { put<kAcc>(dst, g); }
};
template <class C, bool kAcc, bool>
struct Negate2 {
  void operator()(C& dst, C g, C, C, C) const { put<kAcc>(dst, -g); }
};
template <class C, bool kAcc>
struct One {
  void operator()(C& dst, C g) const { put<kAcc>(dst, g); }
};

// The four forms (VJP/JVP, accumulate/write) of derivative `op` for both complex dtypes.
template <template <class, bool, bool> class F, int kArity>
void deriv_entry(detail::KernelTable& t, DerivOp op) {
  auto one = [&](auto tag, int dt) {
    using C = decltype(tag);
    auto form = [&](auto f, detail::ElementwiseFn& entry) {
      using K = DerivKernel<decltype(f), C, kArity>;
      t.set(entry, &K::run, &K::flat, &K::one);
    };
    form(F<C, true, true>{}, t.deriv_acc[int(op)][2 + dt]);
    form(F<C, false, true>{}, t.deriv_set[int(op)][2 + dt]);
    form(F<C, true, false>{}, t.complex.tangent_acc[int(op)][dt]);
    form(F<C, false, false>{}, t.complex.tangent_set[int(op)][dt]);
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

// ---- parts ----
template <class C> struct Make { void operator()(C& y, Part<C> re, Part<C> im) const { y = C(re, im); } };
template <class C> struct Real { void operator()(Part<C>& y, C x) const { y = x.real(); } };
template <class C> struct Imag { void operator()(Part<C>& y, C x) const { y = x.imag(); } };
template <class C> struct Conj { void operator()(C& y, C x) const { y = std::conj(x); } };
template <class C> struct Abs { void operator()(Part<C>& y, C x) const { y = std::abs(x); } };
template <class C> struct Angle { void operator()(Part<C>& y, C x) const { y = std::arg(x); } };
template <class C> struct FromReal {
  void operator()(C& y, Part<C> x) const { y = C(x, Part<C>(0)); }
  // A contiguous row as a loop over the parts (vectorised; the one over std::complex is not).
  static constexpr bool kRows = true;
  static int64_t rows(int64_t n, std::tuple<C*, Part<C>*> p, const int64_t* s) {
    if (s[0] != 1 || s[1] != 1) return 0;
    auto* y = reinterpret_cast<Part<C>*>(std::get<0>(p));
    const Part<C>* x = std::get<1>(p);
    for (int64_t i = 0; i < n; ++i) {
      y[2 * i] = x[i];
      y[2 * i + 1] = Part<C>(0);
    }
    return n;
  }
};
template <class To, class From> struct Convert { void operator()(To& y, From x) const { y = To(x); } };

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
  deriv_entry<Pass2, 5>(t, DerivOp::add_a);
  deriv_entry<Pass2, 5>(t, DerivOp::add_b);
  deriv_entry<Pass2, 5>(t, DerivOp::sub_a);
  deriv_entry<Negate2, 5>(t, DerivOp::sub_b);
  deriv_entry<BinaryOf<DMulA>::F, 5>(t, DerivOp::mul_a);
  deriv_entry<BinaryOf<DMulB>::F, 5>(t, DerivOp::mul_b);
  deriv_entry<BinaryOf<DDivA>::F, 5>(t, DerivOp::div_a);
  deriv_entry<BinaryOf<DDivB>::F, 5>(t, DerivOp::div_b);
  deriv_entry<BinaryOf<DPowA>::F, 5>(t, DerivOp::pow_a);
  deriv_entry<BinaryOf<DPowB>::F, 5>(t, DerivOp::pow_b);
  deriv_entry<OneOf, 2>(t, DerivOp::one);
}

}  // namespace tenax::cpu
