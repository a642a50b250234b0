// CPU tridiagonal solves of complex systems (complex128, complex64), system by system: the Thomas
// algorithm, or LAPACK zgtsv / cgtsv (LU with partial pivoting) on a packed copy. A^T x = rhs for the
// transposed solve (the op's reverse rule conjugates around it: docs/complex.md); no fused reverse
// rule (the op takes the unfused path for complex operands).
#include <cmath>
#include <complex>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tenax/backends/cpu/register.h"

extern "C" {
void zgtsv_(const int* n, const int* nrhs, std::complex<double>* dl, std::complex<double>* d,
            std::complex<double>* du, std::complex<double>* b, const int* ldb, int* info);
void cgtsv_(const int* n, const int* nrhs, std::complex<float>* dl, std::complex<float>* d,
            std::complex<float>* du, std::complex<float>* b, const int* ldb, int* info);
}

namespace tenax::cpu {
namespace {

using detail::TridiagonalArgs;

template <class C>
bool finite(C v) {
  return std::isfinite(v.real()) && std::isfinite(v.imag());
}

// Row i of operand o of system s (o = lower, diag, upper, rhs).
template <class C>
C at(const TridiagonalArgs& a, int o, int64_t s, int64_t i) {
  return static_cast<const C*>(a.in[o])[a.off[o][s] + i * a.step[o]];
}

// System s's three diagonals (of A, or of A^T for a transposed solve) and right-hand side:
// sub[i] = A_{i,i-1} (i >= 1), sup[i] = A_{i,i+1} (i <= n-2).
template <class C>
void gather(const TridiagonalArgs& a, int64_t s, std::vector<C>& sub, std::vector<C>& d, std::vector<C>& sup,
            std::vector<C>& b) {
  const int64_t n = a.n;
  sub.assign(size_t(n), C(0));
  sup.assign(size_t(n), C(0));
  d.resize(size_t(n));
  b.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    d[size_t(i)] = at<C>(a, TridiagonalArgs::diag, s, i);
    b[size_t(i)] = at<C>(a, TridiagonalArgs::rhs, s, i);
    if (i >= 1) sub[size_t(i)] = a.transpose ? at<C>(a, TridiagonalArgs::upper, s, i - 1) : at<C>(a, TridiagonalArgs::lower, s, i);
    if (i + 1 < n) sup[size_t(i)] = a.transpose ? at<C>(a, TridiagonalArgs::lower, s, i + 1) : at<C>(a, TridiagonalArgs::upper, s, i);
  }
}

// Thomas in place on b; false on a zero or non-finite pivot.
template <class C>
bool thomas(const std::vector<C>& sub, const std::vector<C>& d, const std::vector<C>& sup, std::vector<C>& b,
            std::vector<C>& c) {
  const size_t n = d.size();
  c.resize(n);
  C pivot = d[0];
  if (pivot == C(0) || !finite(pivot)) return false;
  c[0] = sup[0] / pivot;
  b[0] /= pivot;
  for (size_t i = 1; i < n; ++i) {
    pivot = d[i] - sub[i] * c[i - 1];
    if (pivot == C(0) || !finite(pivot)) return false;
    c[i] = sup[i] / pivot;
    b[i] = (b[i] - sub[i] * b[i - 1]) / pivot;
  }
  for (size_t i = n - 1; i-- > 0;) b[i] -= c[i] * b[i + 1];
  return true;
}

template <class C>
bool gtsv(std::vector<C>& sub, std::vector<C>& d, std::vector<C>& sup, std::vector<C>& b) {
  const int n = int(d.size()), nrhs = 1;
  int info = 0;
  if constexpr (std::is_same_v<C, std::complex<double>>)
    zgtsv_(&n, &nrhs, sub.data() + 1, d.data(), sup.data(), b.data(), &n, &info);
  else
    cgtsv_(&n, &nrhs, sub.data() + 1, d.data(), sup.data(), b.data(), &n, &info);
  if (info != 0) return false;
  for (const C& v : b)
    if (!finite(v)) return false;
  return true;
}

template <class C>
int64_t solve(const TridiagonalArgs& a) {
  if (a.vjp) return 0;  // no fused reverse rule for complex systems (the op never asks for one)
  std::vector<C> sub, d, sup, b, scratch;
  for (int64_t s = 0; s < a.systems; ++s) {
    gather(a, s, sub, d, sup, b);
    if (!(a.pivoting ? gtsv(sub, d, sup, b) : thomas(sub, d, sup, b, scratch))) return s;
    C* x = static_cast<C*>(a.out) + a.off[TridiagonalArgs::x][s];
    for (int64_t i = 0; i < a.n; ++i) x[i * a.step[TridiagonalArgs::x]] = b[size_t(i)];
  }
  return -1;
}

}  // namespace

void register_tridiagonal_complex(detail::KernelTable& t) {
  t.tridiagonal[2] = solve<std::complex<double>>;
  t.tridiagonal[3] = solve<std::complex<float>>;
}

}  // namespace tenax::cpu
