// Linked instead of the CUDA backend in builds without it (TENAX_CUDA=OFF or no nvcc).
#include "tenax/backends/kernels.h"

namespace tenax::detail {

int cuda_device_count() { return 0; }
int64_t cuda_kernel_launches() { return 0; }
int64_t cuda_kernels_run() { return 0; }

Allocator* default_cuda_allocator(int) { return nullptr; }
int64_t cuda_pool_reserved_bytes(int) { return 0; }

void register_cuda_kernels(KernelTable& t) { (void)t; }

}  // namespace tenax::detail
