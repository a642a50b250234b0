// CUDA batched small dense linear algebra: one thread per matrix running the algorithms the CPU
// kernels run (Cholesky, triangular solves and the Cholesky reverse rule from
// backends/small_linalg.h; LU with partial pivoting for solve and logdet, where the CPU calls
// LAPACK), for the 2..64 sizes of state-space models; cuSOLVER's batched routines
// are the route for large matrices. An eager call uploads its per-matrix offsets and synchronises:
// the first failed matrix (not positive definite, singular) comes back through one device word.
// A recorded scan program's call (MatBatch::deferred_failure) brings device offsets and its own
// word and does neither, so it can be part of a CUDA graph.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/register.h"
#include "tenax/backends/small_linalg.h"

namespace tenax::detail::cuda {
namespace {

using cuda::check;
using cuda::use_device_of;
constexpr int kBlock = 128;
int blocks_for(int64_t count) { return cuda::blocks_for(count, kBlock); }

using cuda::Scratch;

// Makes the device of a pointer current on construction (before the members after it allocate).
struct OnDeviceOf {
  int index;
  OnDeviceOf(const void* p, const char* what) : index(use_device_of(p, what)) {}
};

// The batch's offsets on the device (null where the host has none), the failure word after them,
// set to LLONG_MAX; the destination's device made current. A deferred batch (a recorded program's
// call) brings device offsets and its own failure word: nothing is uploaded or waited for.
struct Upload {
  OnDeviceOf device;
  std::optional<Scratch> buffer;
  const int64_t* off[3] = {};
  unsigned long long* failed = nullptr;
  bool deferred = false;
  Upload(const MatBatch& b, const void* dst, const char* what) : device(dst, what) {
    if (b.deferred_failure) {
      deferred = true;
      off[0] = b.offsets_a;
      off[1] = b.offsets_b;
      off[2] = b.offsets_c;
      failed = b.deferred_failure;
      return;
    }
    buffer.emplace((3 * static_cast<std::size_t>(b.count) + 1) * sizeof(int64_t), what);
    auto* base = static_cast<int64_t*>(buffer->p);
    const int64_t* host[3] = {b.offsets_a, b.offsets_b, b.offsets_c};
    for (int k = 0; k < 3; ++k) {
      if (!host[k]) continue;
      int64_t* d = base + k * b.count;
      cuda::upload(d, host[k], b.count, what);
      off[k] = d;
    }
    failed = reinterpret_cast<unsigned long long*>(base + 3 * b.count);
    const unsigned long long none = static_cast<unsigned long long>(LLONG_MAX);
    check(cudaMemcpyAsync(failed, &none, sizeof(none), cudaMemcpyHostToDevice, cudaStreamPerThread), what);
  }
  // Waits for the kernel (unless deferred); the first failed matrix or -1.
  int64_t result(const char* what) const {
    check(cudaGetLastError(), what);
    cuda::count_launches();
    if (deferred) return -1;
    unsigned long long f = 0;
    check(cudaMemcpyAsync(&f, failed, sizeof(f), cudaMemcpyDeviceToHost, cudaStreamPerThread), what);
    check(cudaStreamSynchronize(cudaStreamPerThread), what);
    note_device_wait(what, device.index);
    return f == static_cast<unsigned long long>(LLONG_MAX) ? -1 : static_cast<int64_t>(f);
  }
};

template <class T>
struct Mat {
  T* p;
  int64_t rs, cs;
  __host__ __device__ T& operator()(int64_t i, int64_t j) const { return p[i * rs + j * cs]; }
};
template <class T>
__device__ Mat<T> at(MatView v, const int64_t* off, int64_t b) {
  return {static_cast<T*>(v.data) + (off ? off[b] : 0), v.rs, v.cs};
}

__device__ inline void fail(unsigned long long* word, int64_t b) {
  atomicMin(word, static_cast<unsigned long long>(b));
}

template <class T>
__global__ void cholesky_k(MatView a, MatView l, int64_t count, const int64_t* oa, const int64_t* ob,
                           unsigned long long* failed) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < count && !small::cholesky<T>(at<T>(a, oa, b), at<T>(l, ob, b), a.n)) fail(failed, b);
}

template <class T>
int64_t cholesky(MatView a, MatView l, const MatBatch& batch) {
  if (batch.count == 0) return -1;
  Upload up(batch, l.data, "cholesky");
  cholesky_k<T><<<blocks_for(batch.count), kBlock, 0, cudaStreamPerThread>>>(a, l, batch.count, up.off[0],
                                                                             up.off[1], up.failed);
  return up.result("cholesky");
}

template <class T>
__global__ void tri_solve_k(MatView t, RhsView r, bool lower, int64_t count, const int64_t* oa,
                            const int64_t* ob, unsigned long long* failed) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= count) return;
  T* rb = static_cast<T*>(r.data) + (ob ? ob[b] : 0);
  if (!small::triangular_solve<T>(at<T>(t, oa, b), t.n, lower, rb, r.nrhs, r.rs, r.cs)) fail(failed, b);
}

template <class T>
int64_t tri_solve(MatView t, RhsView r, bool lower, const MatBatch& batch) {
  if (batch.count == 0) return -1;
  Upload up(batch, r.data, "triangular_solve");
  tri_solve_k<T><<<blocks_for(batch.count), kBlock, 0, cudaStreamPerThread>>>(
      t, r, lower, batch.count, up.off[0], up.off[1], up.failed);
  return up.result("triangular_solve");
}

// LU with partial pivoting of matrix A into lu (row-major n x n scratch) and piv; false if singular.
template <class T>
__device__ bool lu_factor(Mat<T> A, int64_t n, T* lu, int* piv) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) lu[i * n + j] = A(i, j);
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < n; ++i)
      if (fabs(lu[i * n + k]) > fabs(lu[p * n + k])) p = i;
    piv[k] = static_cast<int>(p);
    if (lu[p * n + k] == T(0) || !isfinite(lu[p * n + k])) return false;
    if (p != k)
      for (int64_t j = 0; j < n; ++j) {
        const T s = lu[k * n + j];
        lu[k * n + j] = lu[p * n + j];
        lu[p * n + j] = s;
      }
    for (int64_t i = k + 1; i < n; ++i) {
      const T f = lu[i * n + k] / lu[k * n + k];
      lu[i * n + k] = f;
      for (int64_t j = k + 1; j < n; ++j) lu[i * n + j] -= f * lu[k * n + j];
    }
  }
  return true;
}

// Solves (LU) z = r for one column z (stride rs), in place.
template <class T>
__device__ void lu_solve_column(const T* lu, const int* piv, int64_t n, T* z, int64_t rs) {
  for (int64_t k = 0; k < n; ++k)
    if (piv[k] != k) {
      const T s = z[k * rs];
      z[k * rs] = z[piv[k] * rs];
      z[piv[k] * rs] = s;
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < i; ++k) z[i * rs] -= lu[i * n + k] * z[k * rs];
  for (int64_t i = n - 1; i >= 0; --i) {
    T s = z[i * rs];
    for (int64_t k = i + 1; k < n; ++k) s -= lu[i * n + k] * z[k * rs];
    z[i * rs] = s / lu[i * n + i];
  }
}

// Factors matrix b into its slice of the per-call scratch (lu, piv point there); a singular
// matrix is recorded as failed and gives false.
template <class T>
__device__ bool factor(MatView a, const int64_t* oa, int64_t b, T* scratch, int* pivots, T*& lu, int*& piv,
                       unsigned long long* failed) {
  lu = scratch + b * a.n * a.n;
  piv = pivots + b * a.n;
  if (lu_factor(at<T>(a, oa, b), a.n, lu, piv)) return true;
  fail(failed, b);
  return false;
}

template <class T>
__global__ void solve_k(MatView a, RhsView r, int64_t count, const int64_t* oa, const int64_t* ob, T* scratch,
                        int* pivots, unsigned long long* failed) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  T* lu = nullptr;
  int* piv = nullptr;
  if (b >= count || !factor(a, oa, b, scratch, pivots, lu, piv, failed)) return;
  const int64_t n = a.n;
  T* rb = static_cast<T*>(r.data) + (ob ? ob[b] : 0);
  for (int64_t c = 0; c < r.nrhs; ++c) lu_solve_column(lu, piv, n, rb + c * r.cs, r.rs);
}

// Per matrix: an n x n LU factor and n pivots.
template <class T>
struct LuScratch {
  Scratch lu, piv;
  LuScratch(int64_t count, int64_t n, const char* what)
      : lu(static_cast<std::size_t>(count * n * n) * sizeof(T), what),
        piv(static_cast<std::size_t>(count * n) * sizeof(int), what) {}
  [[nodiscard]] T* factors() const { return static_cast<T*>(lu.p); }
  [[nodiscard]] int* pivots() const { return static_cast<int*>(piv.p); }
};

template <class T>
int64_t solve(MatView a, RhsView r, const MatBatch& batch) {
  if (batch.count == 0) return -1;
  Upload up(batch, r.data, "solve");
  LuScratch<T> s(batch.count, a.n, "solve");
  solve_k<T><<<blocks_for(batch.count), kBlock, 0, cudaStreamPerThread>>>(
      a, r, batch.count, up.off[0], up.off[1], s.factors(), s.pivots(), up.failed);
  return up.result("solve");
}

template <class T>
__global__ void logdet_k(MatView a, T* out, MatView inv_t, bool want, int64_t count, const int64_t* oa,
                         const int64_t* ob, const int64_t* oc, T* scratch, int* pivots,
                         unsigned long long* failed) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  T* lu = nullptr;
  int* piv = nullptr;
  if (b >= count || !factor(a, oa, b, scratch, pivots, lu, piv, failed)) return;
  const int64_t n = a.n;
  T s = T(0);
  for (int64_t i = 0; i < n; ++i) s += log(fabs(lu[i * n + i]));
  out[ob ? ob[b] : 0] = s;
  if (!want) return;
  // A^{-T}: column j of A^{-1} solves A z = e_j; it is row j of A^{-T}, written in place there.
  Mat<T> R = at<T>(inv_t, oc, b);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < n; ++i) R(j, i) = i == j ? T(1) : T(0);
    lu_solve_column(lu, piv, n, &R(j, 0), inv_t.cs);
  }
}

template <class T>
int64_t logdet(MatView a, void* out, MatView inv_t, bool want_inverse, const MatBatch& batch) {
  if (batch.count == 0) return -1;
  Upload up(batch, out, "logdet");
  LuScratch<T> s(batch.count, a.n, "logdet");
  logdet_k<T><<<blocks_for(batch.count), kBlock, 0, cudaStreamPerThread>>>(
      a, static_cast<T*>(out), inv_t, want_inverse, batch.count, up.off[0], up.off[1], up.off[2], s.factors(),
      s.pivots(), up.failed);
  return up.result("logdet");
}

// Abar += the reverse rule of Cholesky (backends/small_linalg.h), 2 n^2 doubles of scratch each.
template <class T>
__global__ void cholesky_vjp_k(MatView l, MatView lbar, MatView abar, int64_t count, const int64_t* oa,
                               const int64_t* ob, const int64_t* oc, double* scratch) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= count) return;
  const int64_t n = l.n;
  double* P = scratch + b * 2 * n * n;
  small::cholesky_vjp<T>(at<T>(l, oa, b), at<T>(lbar, ob, b), at<T>(abar, oc, b), n, P, P + n * n);
}

template <class T>
void cholesky_vjp(MatView l, MatView lbar, MatView abar, const MatBatch& batch) {
  if (batch.count == 0) return;
  Upload up(batch, abar.data, "cholesky vjp");
  Scratch s(static_cast<std::size_t>(batch.count * 2 * l.n * l.n) * sizeof(double), "cholesky vjp");
  cholesky_vjp_k<T><<<blocks_for(batch.count), kBlock, 0, cudaStreamPerThread>>>(
      l, lbar, abar, batch.count, up.off[0], up.off[1], up.off[2], static_cast<double*>(s.p));
  (void)up.result("cholesky vjp");
}

}  // namespace

void register_linalg(KernelTable& t) {
  t.cholesky[0] = cholesky<double>;
  t.cholesky[1] = cholesky<float>;
  t.cholesky_vjp[0] = cholesky_vjp<double>;
  t.cholesky_vjp[1] = cholesky_vjp<float>;
  t.tri_solve[0] = tri_solve<double>;
  t.tri_solve[1] = tri_solve<float>;
  t.solve[0] = solve<double>;
  t.solve[1] = solve<float>;
  t.logdet[0] = logdet<double>;
  t.logdet[1] = logdet<float>;
}

}  // namespace tenax::detail::cuda
