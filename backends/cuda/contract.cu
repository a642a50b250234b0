// CUDA contraction z[b, m, n] (+)= Σ_k x[b, m, k] y[b, k, n] over strided groups of dims: one
// thread per output element, the k group walked in its own loop, or a block per output element
// when k is long and the outputs few. Plain and general (any layout, no copies); cuBLAS
// strided-batched gemm for large single-dim groups is the next step.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail {
namespace {

// Offsets of flat index i of group g into x, y and z (row-major over the group's dims).
__device__ inline void group_offsets(const ContractGroup& g, int64_t i, int64_t& ox, int64_t& oy,
                                     int64_t& oz) {
  ox = oy = oz = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t j = i % g.sizes[d];
    i /= g.sizes[d];
    ox += j * g.x[d];
    oy += j * g.y[d];
    oz += j * g.z[d];
  }
}

__host__ __device__ inline int64_t group_size(const ContractGroup& g) {
  int64_t n = 1;
  for (int d = 0; d < g.rank; ++d) n *= g.sizes[d];
  return n;
}

// Offsets into x, y and z of output element idx (row-major over batch, m, n).
__device__ inline void output_offsets(const ContractArgs& a, int64_t idx, int64_t M, int64_t N, int64_t& ox,
                                      int64_t& oy, int64_t& oz) {
  int64_t bx, by, bz, mx, my, mz, nx, ny, nz;
  group_offsets(a.batch, idx / (N * M), bx, by, bz);
  group_offsets(a.m, (idx / N) % M, mx, my, mz);
  group_offsets(a.n, idx % N, nx, ny, nz);
  ox = bx + mx + nx;
  oy = by + my + ny;
  oz = bz + mz + nz;
}

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

template <class T>
void contract(const ContractArgs& a) {
  const int64_t B = group_size(a.batch), M = group_size(a.m), N = group_size(a.n), K = group_size(a.k);
  const int64_t total = B * M * N;
  if (total == 0) return;
  cuda::use_device_of(a.z, "dot");
  if (K >= 4 * kReduceBlock && total <= 65536) {
    contract_reduce_kernel<T>
        <<<static_cast<int>(std::min<int64_t>(total, 65535)), kReduceBlock, 0, cudaStreamPerThread>>>(
            a, M, N, K, total);
    cuda::check_launch("dot");
    return;
  }
  constexpr int kBlock = 256;
  const int grid = std::min(cuda::blocks_for(total, kBlock), 65535);  // grid-stride beyond
  contract_kernel<T><<<grid, kBlock, 0, cudaStreamPerThread>>>(a, M, N, K, total);
  cuda::check_launch("dot");
}

}  // namespace

void register_cuda_contract(KernelTable& t) {
  t.contract[0] = contract<double>;
  t.contract[1] = contract<float>;
}

}  // namespace tenax::detail
