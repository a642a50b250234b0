#pragma once
// Shared by the CUDA kernel files: error checks that throw DeviceError, making the device of a
// pointer current (kernels receive raw pointers only), and launch sizes.
#include <cuda_runtime.h>

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

/// Throws if the last launch failed.
inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw DeviceError(std::string("[") + what + "] CUDA kernel launch: " + cudaGetErrorString(e));
}

/// Blocks of `block` threads covering n items (one item per thread).
inline int blocks_for(int64_t n, int block) { return static_cast<int>((n + block - 1) / block); }

}  // namespace tenax::detail::cuda
