// Weak no-op definitions of the CUDA backend's entry points (backends/kernels.h), in libtenax in
// every build: a program that links the CUDA objects (tenax::cuda) gets their strong definitions
// instead, and a CPU program needs no CUDA library to link.
#include "tenax/backends/kernels.h"

namespace tenax::detail {

[[gnu::weak]] bool cuda_backend_linked() { return false; }
[[gnu::weak]] int cuda_device_count() { return 0; }
[[gnu::weak]] int64_t cuda_kernel_launches() { return 0; }
[[gnu::weak]] int64_t cuda_kernels_run() { return 0; }

[[gnu::weak]] Allocator* default_cuda_allocator(int) { return nullptr; }
[[gnu::weak]] int64_t cuda_pool_reserved_bytes(int) { return 0; }

[[gnu::weak]] void register_cuda_kernels(KernelTable& t) { (void)t; }

}  // namespace tenax::detail
