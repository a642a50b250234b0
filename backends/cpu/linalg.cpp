// CPU batched small dense linear algebra. Cholesky, triangular solves and the Cholesky reverse rule
// are the direct loops of backends/small_linalg.h (per-call LAPACK overhead dominates at the 2..16
// sizes of state-space models; the CUDA backend runs the same loops); LU solve and log-determinant
// call LAPACK getrf/getrs on a packed column-major copy.
#include <cmath>
#include <complex>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenax/backends/cpu/register.h"
#include "tenax/backends/small_linalg.h"

extern "C" {
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda,
             const int* ipiv, double* b, const int* ldb, int* info, std::size_t trans_len);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda,
             const int* ipiv, float* b, const int* ldb, int* info, std::size_t trans_len);
void zgetrf_(const int* m, const int* n, std::complex<double>* a, const int* lda, int* ipiv, int* info);
void cgetrf_(const int* m, const int* n, std::complex<float>* a, const int* lda, int* ipiv, int* info);
void zgetrs_(const char* trans, const int* n, const int* nrhs, const std::complex<double>* a, const int* lda,
             const int* ipiv, std::complex<double>* b, const int* ldb, int* info, std::size_t trans_len);
void cgetrs_(const char* trans, const int* n, const int* nrhs, const std::complex<float>* a, const int* lda,
             const int* ipiv, std::complex<float>* b, const int* ldb, int* info, std::size_t trans_len);
}

namespace tenax::cpu {
namespace {

using detail::MatBatch;
using detail::MatView;
using detail::RhsView;
namespace small = detail::small;

template <class T>
struct M {
  T* p;
  int64_t rs, cs;
  T& operator()(int64_t i, int64_t j) const { return p[i * rs + j * cs]; }
};

template <class T>
M<T> at(MatView v, const int64_t* offsets, int64_t b) {
  return {static_cast<T*>(v.data) + (offsets ? offsets[b] : 0), v.rs, v.cs};
}

// Calls f(n) with n a compile-time constant for n = 1..4 (the loops unroll: state-space models
// at these sizes spend more on loop control than on arithmetic), else with n itself.
template <class F>
auto with_size(int64_t n, F f) {
  switch (n) {
    case 1:
      return f(std::integral_constant<int64_t, 1>{});
    case 2:
      return f(std::integral_constant<int64_t, 2>{});
    case 3:
      return f(std::integral_constant<int64_t, 3>{});
    case 4:
      return f(std::integral_constant<int64_t, 4>{});
    default:
      return f(n);
  }
}

template <class T>
int64_t cholesky(MatView a, MatView l, const MatBatch& batch) {
  return with_size(a.n, [&](auto n) -> int64_t {
    for (int64_t b = 0; b < batch.count; ++b)
      if (!small::cholesky<T>(at<T>(a, batch.offsets_a, b), at<T>(l, batch.offsets_b, b), n)) return b;
    return -1;
  });
}

template <class T>
void cholesky_vjp(MatView l, MatView lbar, MatView abar, const MatBatch& batch) {
  const int64_t n = l.n;
  with_size(n, [&](auto nc) {
    // Scratch P and S (every element written before it is read): on the stack up to 4 x 4.
    double fixed[2 * 16];
    thread_local std::vector<double> buf;
    double* scratch = fixed;
    if constexpr (std::is_same_v<decltype(nc), int64_t>) {
      buf.resize(static_cast<size_t>(2 * n * n));
      scratch = buf.data();
    }
    for (int64_t b = 0; b < batch.count; ++b)
      small::cholesky_vjp<T>(at<T>(l, batch.offsets_a, b), at<T>(lbar, batch.offsets_b, b),
                             at<T>(abar, batch.offsets_c, b), nc, scratch, scratch + n * n);
  });
}

template <class T>
int64_t tri_solve(MatView t, RhsView r, bool lower, const MatBatch& batch) {
  return with_size(t.n, [&](auto n) -> int64_t {
    for (int64_t b = 0; b < batch.count; ++b) {
      T* rb = static_cast<T*>(r.data) + (batch.offsets_b ? batch.offsets_b[b] : 0);
      if (!small::triangular_solve<T>(at<T>(t, batch.offsets_a, b), n, lower, rb, r.nrhs, r.rs, r.cs))
        return b;
    }
    return -1;
  });
}

// One matrix (its offset already in the view: at(v, nullptr, 0)), its size a compile-time
// constant (MatPlan, for replays).
template <int64_t N>
using Size = std::integral_constant<int64_t, N>;

template <class T, int64_t N>
int64_t cholesky_planned(const detail::MatPlan& p) {
  return small::cholesky<T>(at<T>(p.a, nullptr, 0), at<T>(p.b, nullptr, 0), Size<N>{}) ? -1 : 0;
}
template <class T, int64_t N>
int64_t cholesky_vjp_planned(const detail::MatPlan& p) {
  double scratch[2 * N * N];  // P and S, each element written before it is read
  small::cholesky_vjp<T>(at<T>(p.a, nullptr, 0), at<T>(p.b, nullptr, 0), at<T>(p.c, nullptr, 0), Size<N>{},
                         scratch, scratch + N * N);
  return -1;
}
// A triangular solve with R right-hand sides compiled in (R = 0: p.r.nrhs of them).
template <class T, int64_t N, bool Lower, int64_t R>
int64_t tri_solve_planned(const detail::MatPlan& p) {
  auto solve = [&](auto nrhs) {
    return small::triangular_solve<T>(at<T>(p.a, nullptr, 0), Size<N>{}, Lower, static_cast<T*>(p.r.data),
                                      nrhs, p.r.rs, p.r.cs);
  };
  if constexpr (R > 0)
    return solve(Size<R>{}) ? -1 : 0;
  else
    return solve(p.r.nrhs) ? -1 : 0;
}

template <class T, int64_t... N>
bool mat_plan_sizes(detail::MatKind kind, detail::MatPlan& p, std::integer_sequence<int64_t, N...>) {
  using Run = int64_t (*)(const detail::MatPlan&);
  static constexpr Run chol[] = {cholesky_planned<T, N>...};
  static constexpr Run vjp[] = {cholesky_vjp_planned<T, N>...};
  // Triangular solves by right-hand sides: 1, 2, 4 compiled in, others at run time.
  static constexpr Run lower[][4] = {{tri_solve_planned<T, N, true, 1>, tri_solve_planned<T, N, true, 2>,
                                      tri_solve_planned<T, N, true, 4>, tri_solve_planned<T, N, true, 0>}...};
  static constexpr Run upper[][4] = {{tri_solve_planned<T, N, false, 1>, tri_solve_planned<T, N, false, 2>,
                                      tri_solve_planned<T, N, false, 4>,
                                      tri_solve_planned<T, N, false, 0>}...};
  const int64_t nrhs = p.r.nrhs;
  const size_t by_rhs = nrhs == 1 ? 0 : nrhs == 2 ? 1 : nrhs == 4 ? 2 : 3;
  const int64_t n = p.a.n;
  if (n < 1 || n > static_cast<int64_t>(sizeof...(N))) return false;
  const auto i = static_cast<size_t>(n - 1);
  switch (kind) {
    case detail::MatKind::cholesky:
      p.run = chol[i];
      return true;
    case detail::MatKind::cholesky_vjp:
      p.run = vjp[i];
      return true;
    case detail::MatKind::tri_solve:
      p.run = p.lower ? lower[i][by_rhs] : upper[i][by_rhs];
      return true;
  }
  return false;
}

// Sizes 1 to 4 (those the batched kernels unroll too).
template <class T>
bool mat_plan(detail::MatKind kind, detail::MatPlan& p) {
  return mat_plan_sizes<T>(kind, p, std::integer_sequence<int64_t, 1, 2, 3, 4>{});
}

template <class T>
void getrf(int n, T* a, int* ipiv, int* info) {
  if constexpr (std::is_same_v<T, std::complex<double>>) zgetrf_(&n, &n, a, &n, ipiv, info);
  else if constexpr (std::is_same_v<T, std::complex<float>>) cgetrf_(&n, &n, a, &n, ipiv, info);
  else if constexpr (sizeof(T) == 8) dgetrf_(&n, &n, a, &n, ipiv, info);
  else sgetrf_(&n, &n, a, &n, ipiv, info);
}
template <class T>
void getrs(int n, int nrhs, const T* a, const int* ipiv, T* b, int* info) {
  const char tr = 'N';
  if constexpr (std::is_same_v<T, std::complex<double>>) zgetrs_(&tr, &n, &nrhs, a, &n, ipiv, b, &n, info, 1);
  else if constexpr (std::is_same_v<T, std::complex<float>>) cgetrs_(&tr, &n, &nrhs, a, &n, ipiv, b, &n, info, 1);
  else if constexpr (sizeof(T) == 8) dgetrs_(&tr, &n, &nrhs, a, &n, ipiv, b, &n, info, 1);
  else sgetrs_(&tr, &n, &nrhs, a, &n, ipiv, b, &n, info, 1);
}

// Packs matrix b of `a` column-major into lu and factorises it; false when singular or when a pivot
// is not finite.
template <class T>
bool lu(MatView a, const int64_t* offsets, int64_t b, std::vector<T>& lu_buf, std::vector<int>& piv) {
  const int64_t n = a.n;
  M<T> A = at<T>(a, offsets, b);
  lu_buf.resize(static_cast<size_t>(n * n));
  piv.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i) lu_buf[j * n + i] = A(i, j);
  int info = 0;
  getrf<T>(int(n), lu_buf.data(), piv.data(), &info);
  if (info != 0) return false;
  // A NaN or infinity in A reaches U's diagonal: a failure, as on the GPU and in the other
  // factorisations (docs/robustness.md), not a solution of NaNs.
  for (int64_t i = 0; i < n; ++i)
    if (!small::finite(lu_buf[i * n + i])) return false;
  return true;
}

template <class T>
int64_t solve(MatView a, RhsView r, const MatBatch& batch) {
  const int64_t n = a.n;
  thread_local std::vector<T> lu_buf, rhs;
  thread_local std::vector<int> piv;
  for (int64_t b = 0; b < batch.count; ++b) {
    if (!lu<T>(a, batch.offsets_a, b, lu_buf, piv)) return b;
    T* rb = static_cast<T*>(r.data) + (batch.offsets_b ? batch.offsets_b[b] : 0);
    rhs.resize(static_cast<size_t>(n * r.nrhs));
    for (int64_t c = 0; c < r.nrhs; ++c)
      for (int64_t i = 0; i < n; ++i) rhs[c * n + i] = rb[i * r.rs + c * r.cs];
    int info = 0;
    getrs<T>(int(n), int(r.nrhs), lu_buf.data(), piv.data(), rhs.data(), &info);
    for (int64_t c = 0; c < r.nrhs; ++c)
      for (int64_t i = 0; i < n; ++i) rb[i * r.rs + c * r.cs] = rhs[c * n + i];
  }
  return -1;
}

template <class T>
int64_t logdet(MatView a, void* out, MatView inv_t, bool want_inverse, const MatBatch& batch) {
  const int64_t n = a.n;
  thread_local std::vector<T> lu_buf, eye;
  thread_local std::vector<int> piv;
  for (int64_t b = 0; b < batch.count; ++b) {
    if (!lu<T>(a, batch.offsets_a, b, lu_buf, piv)) return b;
    T s = T(0);
    for (int64_t i = 0; i < n; ++i) s += std::log(std::fabs(lu_buf[i * n + i]));
    static_cast<T*>(out)[batch.offsets_b ? batch.offsets_b[b] : 0] = s;
    if (!want_inverse) continue;
    eye.assign(static_cast<size_t>(n * n), T(0));
    for (int64_t i = 0; i < n; ++i) eye[i * n + i] = T(1);
    int info = 0;
    getrs<T>(int(n), int(n), lu_buf.data(), piv.data(), eye.data(), &info);
    M<T> R = at<T>(inv_t, batch.offsets_c, b);
    // eye now holds A^{-1} column-major: (A^{-1})_{ij} = eye[j * n + i]; write its transpose.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) R(i, j) = eye[i * n + j];
  }
  return -1;
}

}  // namespace

void register_linalg(detail::KernelTable& t) {
  t.cholesky[0] = cholesky<double>;
  t.cholesky[1] = cholesky<float>;
  t.cholesky_vjp[0] = cholesky_vjp<double>;
  t.cholesky_vjp[1] = cholesky_vjp<float>;
  t.tri_solve[0] = tri_solve<double>;
  t.tri_solve[1] = tri_solve<float>;
  t.mat_plan[0] = mat_plan<double>;
  t.mat_plan[1] = mat_plan<float>;
  t.solve[0] = solve<double>;
  t.solve[1] = solve<float>;
  // Complex: Hermitian Cholesky, triangular solves, LU solves (zgetrf / cgetrf).
  t.cholesky[2] = cholesky<std::complex<double>>;
  t.cholesky[3] = cholesky<std::complex<float>>;
  t.tri_solve[2] = tri_solve<std::complex<double>>;
  t.tri_solve[3] = tri_solve<std::complex<float>>;
  t.solve[2] = solve<std::complex<double>>;
  t.solve[3] = solve<std::complex<float>>;
  t.logdet[0] = logdet<double>;
  t.logdet[1] = logdet<float>;
}

}  // namespace tenax::cpu
