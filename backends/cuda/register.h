#pragma once
// The CUDA backend's registration entry points, one per kernel family (device.cu lists them).
#include "tenax/backends/kernels.h"

namespace tenax::detail {

void register_cuda_tridiagonal(KernelTable& t);
void register_cuda_elementwise(KernelTable& t);
void register_cuda_contract(KernelTable& t);
void register_cuda_linalg(KernelTable& t);
void register_cuda_recurrence(KernelTable& t);
void register_cuda_programs(KernelTable& t);
void register_cuda_fusion(KernelTable& t);

}  // namespace tenax::detail
