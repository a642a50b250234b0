// CUDA elementwise kernels, expanded from core/ops/elementwise.def like the CPU ones (forward, the
// reverse rules "dst (+)= g * D(...)", copies, casts, fills, comparisons, select, reductions into
// broadcast destinations). One generic grid-stride loop walks up to kMaxLoopRank strided dims; an
// accumulation whose destination has a zero stride over a dim of size > 1 (a reduction) adds with
// atomics. Kernels run on the per-thread default stream of the destination's device, ordered with
// the stream-ordered allocator and the transfers; nothing here synchronises.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/elementwise_functors.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

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

using cuda::check_launch;
using cuda::use_device_of;
using namespace cuda;  // the functors

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
bool reduces(const LoopDims& d, const LoopArg& dst) {
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

// ---- host entry points (ElementwiseFn) ----

template <template <class> class F, class T>
void unary(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, F<T>, T, T>(d, a, F<T>{}, "elementwise");
}
template <template <class> class F, class T>
void binary(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, F<T>, T, T, T>(d, a, F<T>{}, "elementwise");
}
// Reverse rules of unary ops: args dst, g, x, y.
template <template <class> class F, class T, bool kAcc>
void deriv3(const LoopDims& d, const LoopArg* in) {
  LoopArg a[4] = {in[0], in[1], in[2], in[3]};
  fill_missing<4>(a, device_zero<T>(in[0].data));
  if (kAcc)
    launch_acc<F<T>, T, T, T, T>(d, a, F<T>{}, "vjp");
  else
    launch<Put::assign, F<T>, T, T, T, T>(d, a, F<T>{}, "vjp");
}
// Reverse rules of binary ops: args dst, g, a, b, y.
template <template <class> class F, class T, bool kAcc>
void deriv4(const LoopDims& d, const LoopArg* in) {
  LoopArg a[5] = {in[0], in[1], in[2], in[3], in[4]};
  fill_missing<5>(a, device_zero<T>(in[0].data));
  if (kAcc)
    launch_acc<F<T>, T, T, T, T, T>(d, a, F<T>{}, "vjp");
  else
    launch<Put::assign, F<T>, T, T, T, T, T>(d, a, F<T>{}, "vjp");
}
template <class T, bool kAcc>
void deriv_one(const LoopDims& d, const LoopArg* a) {
  if (kAcc)
    launch_acc<DOne<T>, T, T>(d, a, DOne<T>{}, "vjp");
  else
    launch<Put::assign, DOne<T>, T, T>(d, a, DOne<T>{}, "vjp");
}
template <class T>
void copy(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, Identity<T>, T, T>(d, a, Identity<T>{}, "copy");
}
template <class T>
void acc(const LoopDims& d, const LoopArg* a) {
  launch_acc<Identity<T>, T, T>(d, a, Identity<T>{}, "accumulate");
}
template <class T>
void max_acc(const LoopDims& d, const LoopArg* a) {
  if (reduces(d, a[0]))
    launch<Put::atomic_max, Identity<T>, T, T>(d, a, Identity<T>{}, "max");
  else
    launch<Put::max, Identity<T>, T, T>(d, a, Identity<T>{}, "max");
}
template <class T>
void scale(const LoopDims& d, const LoopArg* a) {
  const Scaled<T> f{static_cast<T>(*static_cast<const double*>(a[2].data))};
  launch<Put::assign, Scaled<T>, T, T>(d, a, f, "scale");
}
template <class T>
void fill(const LoopDims& d, const LoopArg* a) {
  const Constant<T> f{static_cast<T>(*static_cast<const double*>(a[1].data))};
  launch<Put::assign, Constant<T>, T>(d, a, f, "fill");
}
template <class To, class From>
void cast(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, Cast<To, From>, To, From>(d, a, Cast<To, From>{}, "astype");
}
template <class T>
void where(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, Select<T>, T, bool, T, T>(d, a, Select<T>{}, "where");
}
template <template <class> class F, class T>
void compare(const LoopDims& d, const LoopArg* a) {
  launch<Put::assign, F<T>, bool, T, T>(d, a, F<T>{}, "compare");
}

}  // namespace

void register_elementwise(KernelTable& t) {
#define TENAX_UNARY(name, f, df, saves)                                         \
  t.unary[int(UnaryOp::name)][0] = unary<Fwd_##name, double>;                   \
  t.unary[int(UnaryOp::name)][1] = unary<Fwd_##name, float>;                    \
  t.deriv_acc[int(DerivOp::unary_##name)][0] = deriv3<D_##name, double, true>;  \
  t.deriv_acc[int(DerivOp::unary_##name)][1] = deriv3<D_##name, float, true>;   \
  t.deriv_set[int(DerivOp::unary_##name)][0] = deriv3<D_##name, double, false>; \
  t.deriv_set[int(DerivOp::unary_##name)][1] = deriv3<D_##name, float, false>;
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves)                                  \
  t.binary[int(BinaryOp::name)][0] = binary<Fwd_##name, double>;                \
  t.binary[int(BinaryOp::name)][1] = binary<Fwd_##name, float>;                 \
  t.deriv_acc[int(DerivOp::name##_a)][0] = deriv4<D_##name##_a, double, true>;  \
  t.deriv_acc[int(DerivOp::name##_a)][1] = deriv4<D_##name##_a, float, true>;   \
  t.deriv_set[int(DerivOp::name##_a)][0] = deriv4<D_##name##_a, double, false>; \
  t.deriv_set[int(DerivOp::name##_a)][1] = deriv4<D_##name##_a, float, false>;  \
  t.deriv_acc[int(DerivOp::name##_b)][0] = deriv4<D_##name##_b, double, true>;  \
  t.deriv_acc[int(DerivOp::name##_b)][1] = deriv4<D_##name##_b, float, true>;   \
  t.deriv_set[int(DerivOp::name##_b)][0] = deriv4<D_##name##_b, double, false>; \
  t.deriv_set[int(DerivOp::name##_b)][1] = deriv4<D_##name##_b, float, false>;
#include "tenax/core/ops/elementwise.def"
  t.deriv_acc[int(DerivOp::one)][0] = deriv_one<double, true>;
  t.deriv_acc[int(DerivOp::one)][1] = deriv_one<float, true>;
  t.deriv_set[int(DerivOp::one)][0] = deriv_one<double, false>;
  t.deriv_set[int(DerivOp::one)][1] = deriv_one<float, false>;
  t.deriv_acc[int(DerivOp::argmax_mask)][0] = deriv3<DArgmaxMask, double, true>;
  t.deriv_acc[int(DerivOp::argmax_mask)][1] = deriv3<DArgmaxMask, float, true>;
  t.deriv_set[int(DerivOp::argmax_mask)][0] = deriv3<DArgmaxMask, double, false>;
  t.deriv_set[int(DerivOp::argmax_mask)][1] = deriv3<DArgmaxMask, float, false>;
  t.deriv_acc[int(DerivOp::softmax)][0] = deriv3<DSoftmax, double, true>;
  t.deriv_acc[int(DerivOp::softmax)][1] = deriv3<DSoftmax, float, true>;
  t.deriv_set[int(DerivOp::softmax)][0] = deriv3<DSoftmax, double, false>;
  t.deriv_set[int(DerivOp::softmax)][1] = deriv3<DSoftmax, float, false>;
  t.copy[0] = copy<double>;
  t.copy[1] = copy<float>;
  t.copy[2] = copy<int64_t>;
  t.copy[3] = copy<bool>;
  t.acc[0] = acc<double>;
  t.acc[1] = acc<float>;
  t.max_acc[0] = max_acc<double>;
  t.max_acc[1] = max_acc<float>;
  t.scale[0] = scale<double>;
  t.scale[1] = scale<float>;
  t.fill[0] = fill<double>;
  t.fill[1] = fill<float>;
  t.cast_f64_f32 = cast<float, double>;
  t.cast_f32_f64 = cast<double, float>;
  t.where[0] = where<double>;
  t.where[1] = where<float>;
  t.compare[0][0] = compare<Greater, double>;
  t.compare[0][1] = compare<Greater, float>;
  t.compare[1][0] = compare<Less, double>;
  t.compare[1][1] = compare<Less, float>;
  t.compare[2][0] = compare<Equal, double>;
  t.compare[2][1] = compare<Equal, float>;
}

}  // namespace tenax::detail::cuda
