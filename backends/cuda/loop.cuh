#pragma once
// Library-internal (nvcc only): the generic strided loops of the CUDA elementwise kernels, shared by
// the real kernels (elementwise.cu) and the complex ones (complex.cu): one grid-stride loop over up
// to kMaxLoopRank strided dims, and accumulations whose destination is reduced into (a zero
// stride over a dim of size > 1) by a block per output chunk or by atomics.
#include <cuda/std/complex>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/kernels.h"

#ifndef __CUDACC__
#error "loop.cuh is for CUDA sources"
#endif

namespace tenax::detail::cuda {

// Atomic additions of complex numbers, part by part (reductions into a broadcast complex adjoint).
using ::atomicAdd;
template <class R>
__device__ inline void atomicAdd(::cuda::std::complex<R>* p, ::cuda::std::complex<R> v) {
  ::atomicAdd(reinterpret_cast<R*>(p), v.real());
  ::atomicAdd(reinterpret_cast<R*>(p) + 1, v.imag());
}

// How a kernel puts its value into the destination.
enum class Put { assign, add, atomic_add, atomic_max, max };

// A loop's shape and operands, passed by value to the kernel.
template <int N>
struct Loop {
  int rank = 0;
  int64_t total = 1;
  int64_t sizes[kMaxLoopRank] = {};
  char* data[N] = {};
  int64_t strides[N][kMaxLoopRank] = {};
};


template <int N>
Loop<N> pack(const LoopDims& d, const LoopArg* a) {
  Loop<N> l;
  l.rank = d.rank;
  for (int k = 0; k < d.rank; ++k) {
    l.sizes[k] = d.sizes[k];
    l.total *= d.sizes[k];
  }
  for (int i = 0; i < N; ++i) {
    l.data[i] = static_cast<char*>(a[i].data);
    for (int k = 0; k < d.rank; ++k) l.strides[i][k] = a[i].strides[k];
  }
  return l;
}

// Whether operand 0 is a reduction destination: a zero stride over a dim of size > 1.
inline bool reduces(const LoopDims& d, const LoopArg& dst) {
  for (int k = 0; k < d.rank; ++k)
    if (d.sizes[k] > 1 && dst.strides[k] == 0) return true;
  return false;
}

__device__ inline void atomic_max(double* p, double v) {
  auto* a = reinterpret_cast<unsigned long long*>(p);
  unsigned long long old = *a, assumed;
  do {
    assumed = old;
    if (__longlong_as_double(static_cast<long long>(assumed)) >= v) return;
    old = atomicCAS(a, assumed, static_cast<unsigned long long>(__double_as_longlong(v)));
  } while (old != assumed);
}
__device__ inline void atomic_max(float* p, float v) {
  auto* a = reinterpret_cast<unsigned int*>(p);
  unsigned int old = *a, assumed;
  do {
    assumed = old;
    if (__int_as_float(static_cast<int>(assumed)) >= v) return;
    old = atomicCAS(a, assumed, static_cast<unsigned int>(__float_as_int(v)));
  } while (old != assumed);
}

template <Put P, class T>
__device__ inline void put(T* dst, T v) {
  if constexpr (P == Put::assign)
    *dst = v;
  else if constexpr (P == Put::add)
    *dst += v;
  else if constexpr (P == Put::atomic_add)
    atomicAdd(dst, v);
  else if constexpr (P == Put::atomic_max)
    atomic_max(dst, v);
  else
    *dst = v > *dst ? v : *dst;
}

// out[i] (put)= f(in1[i], in2[i], ...) over the loop; Out and Ins are the element types.
template <Put P, class F, class Out, class... Ins, size_t... I>
__device__ inline void apply_at(const Loop<1 + sizeof...(Ins)>& l, const int64_t* off, const F& f,
                                std::index_sequence<I...>) {
  put<P>(reinterpret_cast<Out*>(l.data[0] + off[0]),
         static_cast<Out>(f(*reinterpret_cast<const Ins*>(l.data[I + 1] + off[I + 1])...)));
}

// Element offsets of every operand at linear index idx of the loop (row-major over its dims).
template <int N>
__device__ inline void offsets_of(const Loop<N>& l, int64_t idx, int64_t* off) {
  for (int a = 0; a < N; ++a) off[a] = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t i = idx % l.sizes[d];
    idx /= l.sizes[d];
    for (int a = 0; a < N; ++a) off[a] += i * l.strides[a][d];
  }
}

// f(in1[base + off], in2[...], ...) as Out; offsets in elements, converted here.
template <class F, class Out, class... Ins, size_t... I>
__device__ inline Out eval(char* const* data, const int64_t* base, const int64_t* off, const size_t* sizes,
                           const F& f, std::index_sequence<I...>) {
  return static_cast<Out>(f(*reinterpret_cast<const Ins*>(
      data[I + 1] + (base[I + 1] + off[I + 1]) * static_cast<int64_t>(sizes[I + 1]))...));
}

template <Put P, class F, class Out, class... Ins>
__global__ void loop_kernel(Loop<1 + sizeof...(Ins)> l, F f) {
  constexpr int N = 1 + sizeof...(Ins);
  constexpr size_t sizes[N] = {sizeof(Out), sizeof(Ins)...};
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < l.total;
       idx += step) {
    int64_t off[N];
    offsets_of<N>(l, idx, off);
    for (int a = 0; a < N; ++a) off[a] *= static_cast<int64_t>(sizes[a]);
    apply_at<P, F, Out, Ins...>(l, off, f, std::index_sequence_for<Ins...>{});
  }
}

template <Put P, class F, class Out, class... Ins>
void launch(const LoopDims& d, const LoopArg* a, F f, const char* what) {
  constexpr int N = 1 + sizeof...(Ins);
  Loop<N> l = pack<N>(d, a);
  if (l.total == 0) return;
  use_device_of(a[0].data, what);
  constexpr int kBlock = 256;
  const int grid = std::min(cuda::blocks_for(l.total, kBlock), 65535);  // grid-stride beyond
  loop_kernel<P, F, Out, Ins...><<<grid, kBlock, 0, cudaStreamPerThread>>>(l, f);
  check_launch(what);
}

// ---- reductions: dst[o] += Σ_r f(ins[o, r]) where dst has zero strides over the r dims ----

// The loop split into the destination's dims (o) and the reduced dims (r), each a sub-loop.
template <int N>
struct Split {
  Loop<N> out, red;  // data pointers in `out` only; `red` holds the reduced dims' sizes and strides
};

template <int N>
Split<N> split(const Loop<N>& l, const LoopArg& dst) {
  Split<N> s;
  for (int i = 0; i < N; ++i) s.out.data[i] = l.data[i];
  for (int k = 0; k < l.rank; ++k) {
    Loop<N>& part = (l.sizes[k] > 1 && dst.strides[k] == 0) ? s.red : s.out;
    const int at = part.rank++;
    part.sizes[at] = l.sizes[k];
    part.total *= l.sizes[k];
    for (int i = 0; i < N; ++i) part.strides[i][at] = l.strides[i][k];
  }
  return s;
}

constexpr int kReduceBlock = 256;

// Block (o, c) sums chunk c of output o's reduced elements in shared memory, then adds the total
// to dst[o]: plainly when one chunk covers the output, atomically otherwise (one atomic per block,
// not per element: a full reduction no longer serialises on one address).
template <class F, class Out, class... Ins>
__global__ void reduce_kernel(Split<1 + sizeof...(Ins)> s, int64_t chunk, int64_t chunks, F f) {
  constexpr int N = 1 + sizeof...(Ins);
  constexpr size_t sizes[N] = {sizeof(Out), sizeof(Ins)...};
  __shared__ Out partial[kReduceBlock];
  for (int64_t job = blockIdx.x; job < s.out.total * chunks; job += gridDim.x) {
    const int64_t o = job / chunks, c = job % chunks;
    int64_t base[N], off[N];
    offsets_of<N>(s.out, o, base);
    Out acc = Out(0);
    const int64_t end = min(s.red.total, (c + 1) * chunk);
    for (int64_t r = c * chunk + threadIdx.x; r < end; r += blockDim.x) {
      offsets_of<N>(s.red, r, off);
      acc += eval<F, Out, Ins...>(s.out.data, base, off, sizes, f, std::index_sequence_for<Ins...>{});
    }
    const Out total = cuda::block_sum(acc, partial);
    if (threadIdx.x == 0) {
      Out* dst = reinterpret_cast<Out*>(s.out.data[0] + base[0] * static_cast<int64_t>(sizeof(Out)));
      if (chunks == 1)
        *dst += total;
      else
        atomicAdd(dst, total);
    }
  }
}

// An accumulating kernel dst (+)= f(...). When dst is reduced into (zero strides over dims of
// size > 1): a block per (output, chunk of the reduced extent) when that extent fills a block,
// atomics per element otherwise (short reductions, little contention).
template <class F, class Out, class... Ins>
void launch_acc(const LoopDims& d, const LoopArg* a, F f, const char* what) {
  constexpr int N = 1 + sizeof...(Ins);
  const Loop<N> l = pack<N>(d, a);
  if (l.total == 0) return;
  const Split<N> s = split<N>(l, a[0]);
  if (s.red.rank == 0) {
    launch<Put::add, F, Out, Ins...>(d, a, f, what);
    return;
  }
  if (s.red.total < kReduceBlock) {
    launch<Put::atomic_add, F, Out, Ins...>(d, a, f, what);
    return;
  }
  use_device_of(a[0].data, what);
  // Chunks of at least 16 elements per thread; enough blocks to fill the device.
  const int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>(s.red.total / (16 * kReduceBlock), std::max<int64_t>(1, 1024 / s.out.total)));
  const int64_t chunk = (s.red.total + chunks - 1) / chunks;
  const int grid = static_cast<int>(std::min<int64_t>(s.out.total * chunks, 65535));
  reduce_kernel<F, Out, Ins...><<<grid, kReduceBlock, 0, cudaStreamPerThread>>>(s, chunk, chunks, f);
  check_launch(what);
}

// Unused residual operands of a reverse rule arrive null: they read a zero through zero strides.
template <int N, class T>
void fill_missing(LoopArg* a, const T* zero) {
  for (int i = 2; i < N; ++i)
    if (!a[i].data) {
      a[i].data = const_cast<T*>(zero);
      for (int64_t& s : a[i].strides) s = 0;
    }
}

// A zero on the device of `dst` (made current), for fill_missing; one per device, kept.
template <class T>
const T* device_zero(const void* dst) {
  const int device = use_device_of(dst, "vjp");
  if (device < 0 || device >= 16) throw DeviceError("[vjp] CUDA device index out of range");
  static T* zeros[16] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!zeros[device]) {
    T* p = nullptr;
    if (cudaMalloc(&p, sizeof(T)) != cudaSuccess || cudaMemset(p, 0, sizeof(T)) != cudaSuccess) {
      (void)cudaGetLastError();
      throw DeviceError("[vjp] could not allocate a device zero");
    }
    zeros[device] = p;
  }
  return zeros[device];
}

// A reverse rule "dst (+)= f(g, residuals...)" over kArity operands of type T (dst, g, then the
// residuals, absent ones reading a device zero): accumulating (reductions into broadcast adjoints
// included) or writing a fresh adjoint.
template <class T, size_t>
using Same = T;  // T once per index of a pack
template <class F, class T, bool kAcc, int kArity, size_t... I>
void rule_launch(const LoopDims& d, LoopArg* a, std::index_sequence<I...>) {
  if (kAcc)
    launch_acc<F, T, Same<T, I>...>(d, a, F{}, "vjp");
  else
    launch<Put::assign, F, T, Same<T, I>...>(d, a, F{}, "vjp");
}
template <class F, class T, bool kAcc, int kArity>
void rule(const LoopDims& d, const LoopArg* in) {
  LoopArg a[kArity];
  for (int i = 0; i < kArity; ++i) a[i] = in[i];
  fill_missing<kArity>(a, device_zero<T>(in[0].data));
  rule_launch<F, T, kAcc, kArity>(d, a, std::make_index_sequence<kArity - 1>{});
}

}  // namespace tenax::detail::cuda
