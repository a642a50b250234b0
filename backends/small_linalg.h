#pragma once
// Library-internal: the per-matrix algorithms of the small dense linear algebra, written once for
// both backends (host loops on the CPU, one thread per matrix on CUDA): Cholesky, triangular
// solves with several right-hand sides, the Cholesky reverse rule. M is an accessor with
// operator()(i, j) returning T&; no allocation, no library calls. The size n may be a compile-time
// constant (std::integral_constant), which the host uses to run sizes up to 4 unrolled.
#include <cmath>
#include <complex>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define TENAX_HOST_DEVICE __host__ __device__
#else
#define TENAX_HOST_DEVICE
#endif

namespace tenax::detail::small {

template <class T>
TENAX_HOST_DEVICE inline T square_root(T v) {
#if defined(__CUDA_ARCH__)
  return sqrt(v);
#else
  return std::sqrt(v);
#endif
}
template <class T>
inline constexpr bool is_std_complex = false;
template <class R>
inline constexpr bool is_std_complex<std::complex<R>> = true;

template <class T>
TENAX_HOST_DEVICE inline bool finite(T v) {
#if defined(__CUDA_ARCH__)
  return isfinite(v);
#else
  if constexpr (is_std_complex<T>) return std::isfinite(v.real()) && std::isfinite(v.imag());
  else return std::isfinite(v);
#endif
}
/// conj(v) for a complex T (host only), v itself for a real one.
template <class T>
TENAX_HOST_DEVICE inline T conj_value(T v) {
  if constexpr (is_std_complex<T>) return std::conj(v);
  else return v;
}
/// The real part (the value itself for a real T).
template <class T>
TENAX_HOST_DEVICE inline auto real_value(T v) {
  if constexpr (is_std_complex<T>) return v.real();
  else return v;
}

/// L = chol(A) from A's lower triangle, zeros written above the diagonal; false when A is not
/// positive definite (a pivot <= 0 or not finite: the numeric policy of docs/robustness.md). A
/// complex A is Hermitian (A = L L^H; the imaginary parts of its diagonal are not read).
template <class T, class M, class N = int64_t>
TENAX_HOST_DEVICE bool cholesky(const M& A, const M& L, N n) {
  for (int64_t j = 0; j < n; ++j) {
    auto s = real_value(A(j, j));
    for (int64_t k = 0; k < j; ++k) s -= real_value(L(j, k) * conj_value(L(j, k)));
    if (!(s > 0) || !finite(s)) return false;
    const T d = T(square_root(s));
    L(j, j) = d;
    for (int64_t i = j + 1; i < n; ++i) {
      T t = A(i, j);
      for (int64_t k = 0; k < j; ++k) t -= L(i, k) * conj_value(L(j, k));
      L(i, j) = t / d;
    }
    for (int64_t i = 0; i < j; ++i) L(i, j) = T(0);
  }
  return true;
}

/// The size of a compile-time n (std::integral_constant), 1 for a run-time one.
template <class N>
inline constexpr int64_t fixed_size = 1;
template <class I, I v>
inline constexpr int64_t fixed_size<std::integral_constant<I, v>> = v;

/// Solves T z = r in place for `nrhs` columns of r (column c, element i at r[i * rs + c * cs]),
/// T lower or upper triangular; false (nothing written) when T has a zero or a non-finite value on
/// its diagonal (the numeric policy of docs/robustness.md). nrhs, like n, may be a compile-time
/// constant.
template <class T, class M, class N = int64_t, class R = int64_t>
TENAX_HOST_DEVICE bool triangular_solve(const M& A, N n, bool lower, T* r, R nrhs, int64_t rs, int64_t cs) {
  for (int64_t i = 0; i < n; ++i)
    if (A(i, i) == T(0) || !finite(A(i, i))) return false;
  if constexpr (!std::is_same_v<N, int64_t>) {
    // n known at compile time (<= 4 on the host): the triangle and the reciprocals of its
    // diagonal read once into locals (one division per row instead of one per row and
    // right-hand side), each right-hand side solved in registers (a Kalman step solves 2 x 2
    // systems for 1 and 4 right-hand sides).
    constexpr int64_t S = fixed_size<N>;
    T inv[S];
    T t[S][S] = {};
    for (int64_t i = 0; i < S; ++i) {
      inv[i] = T(1) / A(i, i);
      for (int64_t k = 0; k < S; ++k)
        if (lower ? k < i : k > i) t[i][k] = A(i, k);
    }
    for (int64_t c = 0; c < nrhs; ++c) {
      T* z = r + c * cs;
      T v[S];
      for (int64_t i = 0; i < S; ++i) v[i] = z[i * rs];
      for (int64_t j = 0; j < S; ++j) {
        const int64_t i = lower ? j : S - 1 - j;
        T s = v[i];
        for (int64_t k = lower ? 0 : i + 1; k < (lower ? i : S); ++k) s -= t[i][k] * v[k];
        v[i] = s * inv[i];
      }
      for (int64_t i = 0; i < S; ++i) z[i * rs] = v[i];
    }
    return true;
  }
  for (int64_t c = 0; c < nrhs; ++c) {
    T* z = r + c * cs;
    if (lower) {
      for (int64_t i = 0; i < n; ++i) {
        T s = z[i * rs];
        for (int64_t k = 0; k < i; ++k) s -= A(i, k) * z[k * rs];
        z[i * rs] = s / A(i, i);
      }
    } else {
      for (int64_t i = n - 1; i >= 0; --i) {
        T s = z[i * rs];
        for (int64_t k = i + 1; k < n; ++k) s -= A(i, k) * z[k * rs];
        z[i * rs] = s / A(i, i);
      }
    }
  }
  return true;
}

/// Abar += the reverse rule of Cholesky from L and Lbar, A read through its lower triangle:
/// S = L^{-T} Φ(Lᵀ Lbar) L^{-1} (Φ: lower triangle, halved diagonal); Abar_ij = S_ij + S_ji below
/// the diagonal, S_ii on it, 0 above. P and S: n x n double scratch each.
template <class T, class M, class N = int64_t>
TENAX_HOST_DEVICE void cholesky_vjp(const M& L, const M& G, const M& R, N n, double* P, double* S) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      if (j <= i)
        for (int64_t k = i; k < n; ++k) s += double(L(k, i)) * double(G(k, j));  // L lower: k >= i
      P[i * n + j] = j > i ? 0.0 : (i == j ? 0.5 * s : s);
    }
  // Y = P L^{-1}: each row y of Y solves y L = p, i.e. back substitution on Lᵀ.
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = n - 1; j >= 0; --j) {
      double s = P[r * n + j];
      for (int64_t k = j + 1; k < n; ++k) s -= S[r * n + k] * double(L(k, j));
      S[r * n + j] = s / double(L(j, j));
    }
  // S = L^{-T} Y: each column solves Lᵀ s = y (back substitution), in place.
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = n - 1; i >= 0; --i) {
      double s = S[i * n + c];
      for (int64_t k = i + 1; k < n; ++k) s -= double(L(k, i)) * S[k * n + c];
      S[i * n + c] = s / double(L(i, i));
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      R(i, j) += static_cast<T>(i > j ? S[i * n + j] + S[j * n + i] : (i == j ? S[i * n + i] : 0.0));
}

}  // namespace tenax::detail::small
