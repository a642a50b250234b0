// CUDA backend entry points: device discovery, device memory (a stream-ordered allocator per
// device), host <-> device transfers, and the kernel registration list (elementwise ops and their
// reverse rules, reductions, copies, dot, the small linear algebra, linear_recurrence,
// tridiagonal_solve). A missing kernel raises an error naming the op and the device (never a
// silent trip to the host).
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/register.h"
#include "tenax/core/error.h"
#include "tenax/core/storage.h"

namespace tenax::detail::cuda {
namespace {

void check(cudaError_t e, const char* what, Device d) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(std::string("[") + what + "] " + d.str() + ": " + cudaGetErrorString(e));
}

// Device memory from the device's default memory pool, ordered on the per-thread default stream
// (cudaMallocAsync): freed blocks are reused without a cudaMalloc per step of a scan or map.
// The pool keeps what is freed (its release threshold set to the maximum on first use): with
// CUDA's default threshold of 0 every stream synchronisation handed the freed memory back to the
// driver and the next call mapped it again (bench/RESULTS.md, GPU 2026-11-26). cudaMemPoolTrimTo
// on the device's default pool gives it back (docs/decisions.md).
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : device_(Device::cuda(index)) {}

  void* allocate(std::size_t bytes) override {
    check(cudaSetDevice(device_.index), "alloc", device_);
    std::call_once(keep_freed_, [this] {
      cudaMemPool_t pool = nullptr;
      check(cudaDeviceGetDefaultMemPool(&pool, device_.index), "alloc: the default memory pool", device_);
      uint64_t keep = UINT64_MAX;
      check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
            "alloc: the pool's release threshold", device_);
    });
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, cudaStreamPerThread);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw MemoryError("[alloc] " + device_.str() + " could not provide " + std::to_string(bytes) + " bytes (" +
                        std::to_string(in_use_.load()) + " in use by Tenax)");
    }
    check(e, "alloc", device_);
    const int64_t now = in_use_.fetch_add(int64_t(bytes)) + int64_t(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    allocations_.fetch_add(1);
    system_.fetch_add(1);
    allocated_.fetch_add(int64_t(bytes));
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (cudaSetDevice(device_.index) == cudaSuccess) (void)cudaFreeAsync(ptr, cudaStreamPerThread);
    (void)cudaGetLastError();
    in_use_.fetch_sub(int64_t(bytes));
  }
  [[nodiscard]] Device device() const override { return device_; }
  [[nodiscard]] AllocatorStats stats() const override {
    return {in_use_.load(), peak_.load(), allocations_.load(), system_.load(), allocated_.load()};
  }
  void reset_stats() override {
    peak_.store(in_use_.load());
    allocations_.store(0);
    system_.store(0);
    allocated_.store(0);
  }

 private:
  Device device_;
  std::once_flag keep_freed_;
  std::atomic<int64_t> in_use_{0}, peak_{0}, allocations_{0}, system_{0}, allocated_{0};
};

// Host <-> device and device <-> device copies on the per-thread default stream, waited for.
void transfer(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  const Device gpu = dst_device.kind == Device::Kind::cuda ? dst_device : src_device;
  check(cudaSetDevice(gpu.index), "to", gpu);
  if (dst_device.kind == Device::Kind::cuda && src_device.kind == Device::Kind::cuda &&
      dst_device.index != src_device.index) {
    check(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, cudaStreamPerThread), "to", gpu);
  } else {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread), "to", gpu);
  }
  check(cudaStreamSynchronize(cudaStreamPerThread), "to", gpu);
}

}  // namespace
}  // namespace tenax::detail::cuda

// The backend's entry points (backends/kernels.h).
namespace tenax::detail {

std::atomic<int64_t> cuda::g_launches{0};
std::atomic<int64_t> cuda::g_kernels{0};
bool cuda_backend_linked() { return true; }
int64_t cuda_kernel_launches() { return cuda::g_launches.load(std::memory_order_relaxed); }
int64_t cuda_kernels_run() { return cuda::g_kernels.load(std::memory_order_relaxed); }

int64_t cuda_pool_reserved_bytes(int index) {
  cudaMemPool_t pool = nullptr;
  uint64_t bytes = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, index) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(bytes);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error: no driver or no device is not a failure
    return 0;
  }
  return n;
}

Allocator* default_cuda_allocator(int index) {
  static std::array<std::unique_ptr<cuda::CudaAllocator>, 16> allocators;
  static std::mutex mutex;
  if (index < 0 || index >= 16 || index >= cuda_device_count()) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  auto& a = allocators[size_t(index)];
  if (!a) a = std::make_unique<cuda::CudaAllocator>(index);
  return a.get();
}

void register_cuda_kernels(KernelTable& t) {
  t.transfer = cuda::transfer;
  cuda::register_elementwise(t);
  cuda::register_complex(t);
  cuda::register_contract(t);
  cuda::register_linalg(t);
  cuda::register_recurrence(t);
  cuda::register_tridiagonal(t);
  cuda::register_programs(t);
  cuda::register_fusion(t);  // after the elementwise kernels: it looks them up
}

}  // namespace tenax::detail
