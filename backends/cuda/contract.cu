// CUDA contraction z[b, m, n] (+)= Σ_k x[b, m, k] y[b, k, n] over strided groups of dims:
// cuBLAS strided-batched gemm when every group is one dim (or none) whose layout cuBLAS can read in
// place and the matrices are large; otherwise one thread per output element, the k group walked in
// its own loop, or a block per output element when k is long and the outputs few (any layout, no
// copies). Complex operands (cuda::std::complex, std::complex's layout) take the same paths, cuBLAS's
// zgemm / cgemm for the large ones, and no conjugation (Σ x y, as on the host). cuBLAS is loaded with dlopen on the first large contraction, not linked: a program that
// never needs it does not load it (libcublasLt alone is ~500 MB and initialises itself at load).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda/std/complex>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <string>
#include <type_traits>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/contract_index.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

using cuda::group_offsets;
using cuda::group_size;
using cuda::output_offsets;

template <class T>
__global__ void contract_kernel(ContractArgs a, int64_t M, int64_t N, int64_t K, int64_t total) {
  const auto* x = static_cast<const T*>(a.x);
  const auto* y = static_cast<const T*>(a.y);
  T* z = static_cast<T*>(a.z);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t ox, oy, oz;
    output_offsets(a, idx, M, N, ox, oy, oz);
    T acc = T(0);
    for (int64_t k = 0; k < K; ++k) {
      int64_t kx, ky, kz;
      group_offsets(a.k, k, kx, ky, kz);
      acc += x[ox + kx] * y[oy + ky];
    }
    T& dst = z[oz];
    dst = a.accumulate ? dst + acc : acc;
  }
}

// One block per output element, its threads splitting the k group (shared-memory tree): for long
// contractions into few outputs (a parameter's adjoint summed over many series), where a thread
// per output would walk k alone.
constexpr int kReduceBlock = 128;
template <class T>
__global__ void contract_reduce_kernel(ContractArgs a, int64_t M, int64_t N, int64_t K, int64_t total) {
  const auto* x = static_cast<const T*>(a.x);
  const auto* y = static_cast<const T*>(a.y);
  T* z = static_cast<T*>(a.z);
  __shared__ T partial[kReduceBlock];
  for (int64_t idx = blockIdx.x; idx < total; idx += gridDim.x) {
    int64_t ox, oy, oz;
    output_offsets(a, idx, M, N, ox, oy, oz);
    T acc = T(0);
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      int64_t kx, ky, kz;
      group_offsets(a.k, k, kx, ky, kz);
      acc += x[ox + kx] * y[oy + ky];
    }
    const T total = cuda::block_sum(acc, partial);
    if (threadIdx.x == 0) z[oz] = a.accumulate ? z[oz] + total : total;
  }
}

// Per-matrix work (M N K) from which cuBLAS pays for itself over the plain kernels.
constexpr int64_t kCublasWork = 32768;

// The cuBLAS entry points used here, from the library of the toolkit Tenax was built with (or
// none: a note once, and the plain kernels do the work).
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasDgemmStridedBatched) dgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm = nullptr;
  decltype(&cublasZgemmStridedBatched) zgemm = nullptr;
  decltype(&cublasCgemmStridedBatched) cgemm = nullptr;
  decltype(&cublasGetStatusString) status = nullptr;
};
const Cublas* cublas() {
  static const Cublas* lib = []() -> const Cublas* {
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    static Cublas c;
    auto sym = [&](auto& fn, const char* symbol) {
      fn = h ? reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, symbol)) : nullptr;
      return fn != nullptr;
    };
    const bool ok = sym(c.create, "cublasCreate_v2") & sym(c.destroy, "cublasDestroy_v2") &
                    sym(c.set_stream, "cublasSetStream_v2") & sym(c.dgemm, "cublasDgemmStridedBatched") &
                    sym(c.sgemm, "cublasSgemmStridedBatched") & sym(c.zgemm, "cublasZgemmStridedBatched") &
                    sym(c.cgemm, "cublasCgemmStridedBatched") & sym(c.status, "cublasGetStatusString");
    if (!ok) {
      std::fprintf(
          stderr,
          "tenax: note: %s could not be loaded; large contractions on the GPU use Tenax's own kernels\n",
          name.c_str());
      return nullptr;
    }
    return &c;  // the library stays loaded for the life of the process
  }();
  return lib;
}

// A cuBLAS handle per device and thread (a handle's stream is per handle; this thread's calls go
// to its per-thread stream). Handles live as long as the thread.
cublasHandle_t cublas_handle(const Cublas& lib, int device) {
  struct Handles {
    const Cublas* lib = nullptr;
    std::array<cublasHandle_t, 16> h{};
    ~Handles() {
      for (cublasHandle_t x : h)
        if (x) (void)lib->destroy(x);
    }
  };
  thread_local Handles handles;
  handles.lib = &lib;
  cublasHandle_t& h = handles.h[static_cast<size_t>(device)];
  if (!h) {
    if (lib.create(&h) != CUBLAS_STATUS_SUCCESS)
      throw DeviceError("[dot] cublasCreate failed on cuda:" + std::to_string(device));
    if (lib.set_stream(h, cudaStreamPerThread) != CUBLAS_STATUS_SUCCESS)
      throw DeviceError("[dot] cublasSetStream failed");
  }
  return h;
}

// One operand as cuBLAS sees it (column-major): rows x cols with element (i, j) at i * rs + j * cs.
// Returns false when neither it nor its transpose is a column-major matrix with a valid leading
// dimension; sets the operation and the leading dimension.
bool cublas_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, cublasOperation_t& op, int64_t& ld) {
  // A size-1 dim's stride is free: pick the one that fits.
  const int64_t r_n = rows == 1 ? 1 : rs, c_n = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
  if (r_n == 1 && c_n >= std::max<int64_t>(rows, 1)) {
    op = CUBLAS_OP_N;
    ld = c_n;
    return true;
  }
  const int64_t c_t = cols == 1 ? 1 : cs, r_t = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
  if (c_t == 1 && r_t >= std::max<int64_t>(cols, 1)) {
    op = CUBLAS_OP_T;
    ld = r_t;
    return true;
  }
  return false;
}

cublasStatus_t gemm_batched(const Cublas& lib, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const double* a, int lda, long long sa, const double* b,
                            int ldb, long long sb, double beta, double* c, int ldc, long long sc, int count) {
  const double one = 1.0;
  return lib.dgemm(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}
cublasStatus_t gemm_batched(const Cublas& lib, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const float* a, int lda, long long sa, const float* b,
                            int ldb, long long sb, float beta, float* c, int ldc, long long sc, int count) {
  const float one = 1.0f;
  return lib.sgemm(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, count);
}
using Z = ::cuda::std::complex<double>;
using C = ::cuda::std::complex<float>;
cublasStatus_t gemm_batched(const Cublas& lib, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const Z* a, int lda, long long sa, const Z* b, int ldb,
                            long long sb, Z beta, Z* c, int ldc, long long sc, int count) {
  const cuDoubleComplex one{1.0, 0.0}, bz{beta.real(), beta.imag()};
  return lib.zgemm(h, ta, tb, m, n, k, &one, reinterpret_cast<const cuDoubleComplex*>(a), lda, sa,
                   reinterpret_cast<const cuDoubleComplex*>(b), ldb, sb, &bz, reinterpret_cast<cuDoubleComplex*>(c),
                   ldc, sc, count);
}
cublasStatus_t gemm_batched(const Cublas& lib, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const C* a, int lda, long long sa, const C* b, int ldb,
                            long long sb, C beta, C* c, int ldc, long long sc, int count) {
  const cuComplex one{1.0f, 0.0f}, bc{beta.real(), beta.imag()};
  return lib.cgemm(h, ta, tb, m, n, k, &one, reinterpret_cast<const cuComplex*>(a), lda, sa,
                   reinterpret_cast<const cuComplex*>(b), ldb, sb, &bc, reinterpret_cast<cuComplex*>(c), ldc, sc,
                   count);
}

// The contraction as one cuBLAS strided-batched gemm, in place; false (nothing ran) when a group
// has several dims, a layout is not one cuBLAS reads, the work is small, or a graph is being
// recorded on this thread (the plain kernels record without library workspaces).
template <class T>
bool contract_cublas(const ContractArgs& a, int device, int64_t B, int64_t M, int64_t N, int64_t K) {
  if (a.m.rank > 1 || a.n.rank > 1 || a.k.rank > 1 || a.batch.rank > 1 || M * N * K < kCublasWork)
    return false;
  if (std::max({M, N, K, B}) > INT_MAX || cuda::g_recording) return false;
  const Cublas* lib = cublas();
  if (!lib) return false;
  auto st = [](const ContractGroup& g, const int64_t* s) { return g.rank ? s[0] : int64_t{0}; };
  int64_t xm = st(a.m, a.m.x), zm = st(a.m, a.m.z), yn = st(a.n, a.n.y), zn = st(a.n, a.n.z);
  int64_t xk = st(a.k, a.k.x), yk = st(a.k, a.k.y);
  const auto* x = static_cast<const T*>(a.x);
  const auto* y = static_cast<const T*>(a.y);
  T* z = static_cast<T*>(a.z);
  int64_t sx = st(a.batch, a.batch.x), sy = st(a.batch, a.batch.y), sz = st(a.batch, a.batch.z);
  if (B > 1 && sz == 0) return false;  // every batch entry must write its own outputs
  // C = X Y with C column-major (zm unit) as is; with zn unit, C^T = Y^T X^T instead.
  cublasOperation_t tz;
  int64_t ldz;
  int64_t m = M, n = N;
  if (!cublas_view(M, N, zm, zn, tz, ldz)) return false;
  if (tz == CUBLAS_OP_T) {
    std::swap(m, n);
    std::swap(x, y);
    std::swap(sx, sy);
    const int64_t new_xm = yn, new_xk = yk, new_yk = xk, new_yn = xm;
    xm = new_xm, xk = new_xk, yk = new_yk, yn = new_yn;
  }
  cublasOperation_t tx, ty;
  int64_t ldx, ldy;
  if (!cublas_view(m, K, xm, xk, tx, ldx) || !cublas_view(K, n, yk, yn, ty, ldy)) return false;
  if (std::max({ldx, ldy, ldz}) > INT_MAX) return false;
  const cublasStatus_t s =
      gemm_batched(*lib, cublas_handle(*lib, device), tx, ty, static_cast<int>(m), static_cast<int>(n),
                   static_cast<int>(K), x, static_cast<int>(ldx), sx, y, static_cast<int>(ldy), sy,
                   a.accumulate ? T(1) : T(0), z, static_cast<int>(ldz), sz, static_cast<int>(B));
  if (s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string("[dot] cuBLAS gemm failed: ") + lib->status(s));
  cuda::count_launches();
  return true;
}

template <class T>
void contract(const ContractArgs& a) {
  const int64_t B = group_size(a.batch), M = group_size(a.m), N = group_size(a.n), K = group_size(a.k);
  const int64_t total = B * M * N;
  if (total == 0) return;
  const int device = cuda::use_device_of(a.z, "dot");
  if (K > 0 && contract_cublas<T>(a, device, B, M, N, K)) return;
  // The block reduction keeps its partial sums in shared memory, which takes no complex type (its
  // constructor): complex long contractions into few outputs take the per-output kernel.
  if constexpr (std::is_floating_point_v<T>) {
    if (K >= 4 * kReduceBlock && total <= 65536) {
      contract_reduce_kernel<T>
          <<<static_cast<int>(std::min<int64_t>(total, 65535)), kReduceBlock, 0, cudaStreamPerThread>>>(
              a, M, N, K, total);
      cuda::check_launch("dot");
      return;
    }
  }
  constexpr int kBlock = 256;
  const int grid = std::min(cuda::blocks_for(total, kBlock), 65535);  // grid-stride beyond
  contract_kernel<T><<<grid, kBlock, 0, cudaStreamPerThread>>>(a, M, N, K, total);
  cuda::check_launch("dot");
}

}  // namespace

void register_contract(KernelTable& t) {
  t.contract[0] = contract<double>;
  t.contract[1] = contract<float>;
  t.contract[2] = contract<Z>;
  t.contract[3] = contract<C>;
}

}  // namespace tenax::detail::cuda
