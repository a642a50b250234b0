#pragma once
// The CUDA backend's registration entry points, one per kernel family (device.cu lists them).
#include "tenax/backends/kernels.h"

namespace tenax::detail::cuda {

void register_tridiagonal(KernelTable& t);
void register_elementwise(KernelTable& t);
void register_contract(KernelTable& t);
void register_linalg(KernelTable& t);
void register_recurrence(KernelTable& t);
void register_programs(KernelTable& t);
void register_fusion(KernelTable& t);
void register_complex(KernelTable& t);

}  // namespace tenax::detail::cuda
