#pragma once
// Shared by the CUDA kernel files: error checks that throw DeviceError, making the device of a
// pointer current (kernels receive raw pointers only), and launch sizes.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "tenax/core/error.h"

namespace tenax::detail::cuda {

/// Throws DeviceError "[what] <CUDA's message>" unless e is cudaSuccess (clearing the error).
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(std::string("[") + what + "] " + cudaGetErrorString(e));
}

/// Makes the device that owns `p` current; returns its index.
inline int use_device_of(const void* p, const char* what) {
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e == cudaSuccess && attr.type == cudaMemoryTypeDevice) e = cudaSetDevice(attr.device);
  check(e, what);
  return attr.device;
}

/// Makes the device that owns `p` current; false (error cleared) when `p` is not device memory.
inline bool use_device_of_quiet(const void* p) {
  cudaPointerAttributes attr{};
  const bool ok = cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeDevice &&
                  cudaSetDevice(attr.device) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

/// Device scratch for one call on the per-thread stream, freed (stream-ordered) at scope exit.
struct Scratch {
  void* p = nullptr;
  Scratch(std::size_t bytes, const char* what) {
    check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, cudaStreamPerThread), what);
  }
  ~Scratch() { (void)cudaFreeAsync(p, cudaStreamPerThread); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

/// Copies `count` host offsets to the device (stream-ordered; the host array may be reused after).
inline void upload(int64_t* dst, const int64_t* host, int64_t count, const char* what) {
  check(cudaMemcpyAsync(dst, host, static_cast<std::size_t>(count) * sizeof(int64_t), cudaMemcpyHostToDevice,
                        cudaStreamPerThread),
        what);
}

/// Kernel launches (and library calls such as a cuSPARSE solve) made so far, all devices, and the
/// kernels they ran (a graph runs all its nodes) (device.cu; read through
/// detail::cuda_kernel_launches() and detail::cuda_kernels_run()).
extern std::atomic<int64_t> g_launches;
extern std::atomic<int64_t> g_kernels;
/// Set while a graph is being recorded on this thread: what is recorded is not launched.
inline thread_local bool g_recording = false;
inline void count_launches(int64_t n = 1) {
  if (g_recording) return;
  g_launches.fetch_add(n, std::memory_order_relaxed);
  g_kernels.fetch_add(n, std::memory_order_relaxed);
}
/// One graph launch that runs `nodes` kernels.
inline void count_graph_launch(int64_t nodes) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_kernels.fetch_add(nodes, std::memory_order_relaxed);
}
struct NotCounting {
  bool was = g_recording;
  NotCounting() { g_recording = true; }
  ~NotCounting() { g_recording = was; }
  NotCounting(const NotCounting&) = delete;
  NotCounting& operator=(const NotCounting&) = delete;
};

/// Throws if the last launch failed; counts it.
inline void check_launch(const char* what) {
  count_launches();
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw DeviceError(std::string("[") + what + "] CUDA kernel launch: " + cudaGetErrorString(e));
}

#ifdef __CUDACC__
/// The sum of every thread's `v` over the block (blockDim.x a power of two, `partial` a shared
/// array of blockDim.x), valid in thread 0; every thread must call it.
template <class T>
__device__ inline T block_sum(T v, T* partial) {
  partial[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  const T total = partial[0];
  __syncthreads();  // partial may be reused at once
  return total;
}
#endif

/// Blocks of `block` threads covering n items (one item per thread).
inline int blocks_for(int64_t n, int block) { return static_cast<int>((n + block - 1) / block); }

}  // namespace tenax::detail::cuda
