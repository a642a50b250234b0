#pragma once
// Index arithmetic of the CUDA contraction z[b, m, n] (+)= sum_k x[b, m, k] y[b, k, n] over strided
// groups of dims (nvcc only): shared by its kernels (contract.cu) and the fused chains (fusion.cu).
#include <cstdint>

#include "tenax/backends/kernels.h"

#ifndef __CUDACC__
#error "contract_index.h is for CUDA sources"
#endif

namespace tenax::detail::cuda {

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

}  // namespace tenax::detail::cuda
