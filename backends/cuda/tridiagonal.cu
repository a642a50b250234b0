// CUDA tridiagonal solves through cuSPARSE. Operands are gathered (by the systems' offsets and row
// steps, transposed for the adjoint's A^T solve, with the out-of-matrix ends zeroed as cuSPARSE
// requires) into the layout of the solver the solution's layout calls for: gtsv2StridedBatch when
// each system of x is contiguous (Thomas: cuSPARSE's CR+PCR, no pivoting), gtsvInterleavedBatch
// when the batch axis is (algorithm 0, Thomas) and for Tridiagonal::pivoting (algorithm 1, LU with
// partial pivoting). Workspaces (bufferSizeExt) and staging buffers are cached per device and only
// grow. A failed system shows as a non-finite solution; the first such system is reported. For the
// fused reverse rule (TridiagonalArgs::vjp) the transposed solve's λ is not scattered into a
// tensor but accumulated into the four adjoints by one kernel (`accumulate`).
#include <cuda_runtime.h>
#include <cusparse.h>

#include <array>
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

using Op = TridiagonalArgs::Operand;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(std::string("[tridiagonal_solve] ") + what + ": " + cudaGetErrorString(e));
}
void check(cusparseStatus_t s, const char* what) {
  if (s == CUSPARSE_STATUS_SUCCESS) return;
  throw DeviceError(std::string("[tridiagonal_solve] cuSPARSE ") + what + ": " + cusparseGetErrorString(s));
}

// Per device: the cuSPARSE handle and grow-only buffers, used under the mutex.
struct DeviceState {
  std::mutex mutex;
  cusparseHandle_t handle = nullptr;
  void* work = nullptr;
  size_t work_bytes = 0;
  void* stage = nullptr;
  size_t stage_bytes = 0;
};
DeviceState& state(int device) {
  static std::array<DeviceState, 16> s;
  return s[static_cast<size_t>(device)];
}
void* grow(void*& p, size_t& have, size_t need) {
  if (need > have) {
    if (p) check(cudaFree(p), "cudaFree");
    p = nullptr;
    have = 0;
    check(cudaMalloc(&p, need), "cudaMalloc of a workspace");
    have = need;
  }
  return p;
}

// SystemOffsets on the device: a table uploaded per call, or base + s * stride.
struct DeviceOffsets {
  const int64_t* table = nullptr;
  int64_t base = 0, stride = 0;
  __device__ int64_t operator()(uint32_t s) const { return table ? table[s] : base + int64_t(s) * stride; }
};

// Element (system s, row i) of the solver layout: interleaved i * systems + s, else s * n + i.
// Every index fits 32 bits (the call checks n * systems <= INT_MAX): 32-bit divisions.
__device__ inline void coords(uint32_t id, uint32_t n, uint32_t systems, bool interleaved, uint32_t& s,
                              uint32_t& i) {
  if (interleaved) {
    i = id / systems;
    s = id - i * systems;
  } else {
    s = id / n;
    i = id - s * n;
  }
}

// dst(s, i) = src row i + shift of system s, or 0 outside the rows and on a zeroed end.
template <class T>
__global__ void gather(T* dst, const T* src, DeviceOffsets off, int64_t step, uint32_t n, uint32_t systems,
                       bool interleaved, int shift, bool zero_first, bool zero_last) {
  const uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= n * systems) return;
  uint32_t s, i;
  coords(id, n, systems, interleaved, s, i);
  const int64_t row = int64_t(i) + shift;
  T v = T(0);
  if (!(zero_first && i == 0) && !(zero_last && i == n - 1) && row >= 0 && row < n)
    v = src[off(s) + row * step];
  dst[id] = v;
}

// x(s, i) = sol(s, i); the smallest system with a non-finite value goes to *first_bad.
template <class T>
__global__ void scatter(T* x, const T* sol, DeviceOffsets off, int64_t step, uint32_t n, uint32_t systems,
                        bool interleaved, unsigned long long* first_bad) {
  const uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= n * systems) return;
  uint32_t s, i;
  coords(id, n, systems, interleaved, s, i);
  const T v = sol[id];
  x[off(s) + int64_t(i) * step] = v;
  if (!isfinite(v)) atomicMin(first_bad, static_cast<unsigned long long>(s));
}

// The fused reverse rule (TridiagonalArgs::vjp) after the transposed solve, one thread per unknown:
// λ (the solver's solution, in its layout) and the forward solution x go into the adjoints,
// rhs̄ += λ, diaḡ -= λ x, lower̄_i -= λ_i x_{i-1}, upper̄_i -= λ_i x_{i+1}, each written instead
// where it is fresh (assign; the out-of-matrix ends then 0). Each adjoint element is touched by
// its own thread only, in the host's order (rhs, diag, lower, upper), so one buffer given for
// two operands (a repeated input, accumulated) adds up as on the host. A non-finite λ marks its
// system as failed.
struct DeviceAdjoints {
  const void* x = nullptr;
  void* adj[4] = {};  // lower, diag, upper, rhs (Adjoints::Slot - 1)
  bool assign[4] = {};
  DeviceOffsets off[5];  // by Adjoints::Slot
  int64_t step[5] = {};
};
template <class T>
__global__ void accumulate(const T* lam, DeviceAdjoints j, uint32_t n, uint32_t systems, bool interleaved,
                           unsigned long long* first_bad) {
  const uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= n * systems) return;
  uint32_t s, i;
  coords(id, n, systems, interleaved, s, i);
  const T l = lam[id];
  if (!isfinite(l)) atomicMin(first_bad, static_cast<unsigned long long>(s));
  const T* x = static_cast<const T*>(j.x) + j.off[0](s) + int64_t(i) * j.step[0];
  auto put = [&](int slot, T v) {
    T* p = static_cast<T*>(j.adj[slot - 1]) + j.off[slot](s) + int64_t(i) * j.step[slot];
    *p = j.assign[slot - 1] ? v : *p + v;
  };
  if (j.adj[3]) put(4, l);
  if (j.adj[1]) put(2, -l * x[0]);
  if (j.adj[0]) put(1, i > 0 ? -l * x[-j.step[0]] : T(0));
  if (j.adj[2]) put(3, i + 1 < n ? -l * x[j.step[0]] : T(0));
}

cusparseStatus_t strided_size(cusparseHandle_t h, int m, const double* dl, const double* d, const double* du,
                              const double* x, int count, size_t* bytes) {
  return cusparseDgtsv2StridedBatch_bufferSizeExt(h, m, dl, d, du, x, count, m, bytes);
}
cusparseStatus_t strided_size(cusparseHandle_t h, int m, const float* dl, const float* d, const float* du,
                              const float* x, int count, size_t* bytes) {
  return cusparseSgtsv2StridedBatch_bufferSizeExt(h, m, dl, d, du, x, count, m, bytes);
}
cusparseStatus_t strided(cusparseHandle_t h, int m, double* dl, double* d, double* du, double* x, int count,
                         void* work) {
  return cusparseDgtsv2StridedBatch(h, m, dl, d, du, x, count, m, work);
}
cusparseStatus_t strided(cusparseHandle_t h, int m, float* dl, float* d, float* du, float* x, int count, void* work) {
  return cusparseSgtsv2StridedBatch(h, m, dl, d, du, x, count, m, work);
}
cusparseStatus_t interleaved_size(cusparseHandle_t h, int algo, int m, const double* dl, const double* d,
                                  const double* du, const double* x, int count, size_t* bytes) {
  return cusparseDgtsvInterleavedBatch_bufferSizeExt(h, algo, m, dl, d, du, x, count, bytes);
}
cusparseStatus_t interleaved_size(cusparseHandle_t h, int algo, int m, const float* dl, const float* d,
                                  const float* du, const float* x, int count, size_t* bytes) {
  return cusparseSgtsvInterleavedBatch_bufferSizeExt(h, algo, m, dl, d, du, x, count, bytes);
}
cusparseStatus_t interleaved(cusparseHandle_t h, int algo, int m, double* dl, double* d, double* du, double* x,
                             int count, void* work) {
  return cusparseDgtsvInterleavedBatch(h, algo, m, dl, d, du, x, count, work);
}
cusparseStatus_t interleaved(cusparseHandle_t h, int algo, int m, float* dl, float* d, float* du, float* x, int count,
                             void* work) {
  return cusparseSgtsvInterleavedBatch(h, algo, m, dl, d, du, x, count, work);
}

template <class T>
int64_t tridiagonal(const TridiagonalArgs& a) {
  using Adjoints = TridiagonalArgs::Adjoints;
  if (a.systems <= 0 || a.n <= 0) return -1;
  if (a.n > INT_MAX || a.systems > INT_MAX || a.n * a.systems > INT_MAX)
    throw DeviceError("[tridiagonal_solve] cuSPARSE takes at most 2^31 - 1 unknowns per call; got " +
                      std::to_string(a.n) + " rows x " + std::to_string(a.systems) + " systems");
  const int device = cuda::use_device_of(a.vjp ? a.vjp->x : a.out, "tridiagonal_solve");
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mutex);
  const cudaStream_t stream = cudaStreamPerThread;
  if (!st.handle) check(cusparseCreate(&st.handle), "cusparseCreate");
  check(cusparseSetStream(st.handle, stream), "cusparseSetStream");

  const int64_t n = a.n, S = a.systems, total = n * S;
  // The solver's layout follows x's (the forward solution's, for the fused reverse rule).
  const int64_t x_step = a.vjp ? a.vjp->step[Adjoints::solution] : a.step[Op::x];
  const bool inter = a.pivoting || x_step != 1;
  // Staging: dl, d, du, the right-hand side / solution, the flag and the offsets of the operands
  // (and adjoints) whose systems are not evenly spaced (several batch axes; uploaded, a
  // host-to-device copy each).
  const size_t values = sizeof(T) * size_t(total), offsets = sizeof(int64_t) * size_t(S);
  char* stage = static_cast<char*>(grow(st.stage, st.stage_bytes, 4 * values + 64 + 10 * offsets));
  T* buf[4];
  for (int k = 0; k < 4; ++k) buf[k] = reinterpret_cast<T*>(stage + size_t(k) * values);
  auto* flag = reinterpret_cast<unsigned long long*>(stage + 4 * values);
  auto on_device = [&](const SystemOffsets& o, int region) {
    DeviceOffsets d{nullptr, o.base, o.stride};
    if (o.table) {
      auto* table = reinterpret_cast<int64_t*>(stage + 4 * values + 64 + size_t(region) * offsets);
      check(cudaMemcpyAsync(table, o.table, offsets, cudaMemcpyHostToDevice, stream), "offsets upload");
      d.table = table;
    }
    return d;
  };
  DeviceOffsets off[5];
  for (int o = 0; o < 5; ++o) off[o] = on_device(a.off[o], o);
  DeviceAdjoints adj;
  if (a.vjp) {
    adj.x = a.vjp->x;
    for (int k = 0; k < Adjoints::slots; ++k) {
      adj.off[k] = on_device(a.vjp->off[k], 5 + k);
      adj.step[k] = a.vjp->step[k];
      if (k == Adjoints::solution) continue;
      adj.adj[k - 1] = a.vjp->adj[k - 1];
      adj.assign[k - 1] = a.vjp->assign[k - 1];
    }
  }

  const int threads = 256;
  const auto blocks = static_cast<unsigned>((total + threads - 1) / threads);
  const auto rows = static_cast<uint32_t>(n), systems = static_cast<uint32_t>(S);
  const T* in[4] = {static_cast<const T*>(a.in[0]), static_cast<const T*>(a.in[1]), static_cast<const T*>(a.in[2]),
                    static_cast<const T*>(a.in[3])};
  // A^T: (i, i-1) is upper[i-1] and (i, i+1) is lower[i+1].
  const int lo = a.transpose ? Op::upper : Op::lower, up = a.transpose ? Op::lower : Op::upper;
  gather<T><<<blocks, threads, 0, stream>>>(buf[0], in[lo], off[lo], a.step[lo], rows, systems, inter,
                                            a.transpose ? -1 : 0, true, false);
  gather<T><<<blocks, threads, 0, stream>>>(buf[1], in[Op::diag], off[Op::diag], a.step[Op::diag], rows,
                                            systems, inter, 0, false, false);
  gather<T><<<blocks, threads, 0, stream>>>(buf[2], in[up], off[up], a.step[up], rows, systems, inter,
                                            a.transpose ? 1 : 0, false, true);
  gather<T><<<blocks, threads, 0, stream>>>(buf[3], in[Op::rhs], off[Op::rhs], a.step[Op::rhs], rows, systems,
                                            inter, 0, false, false);
  check(cudaGetLastError(), "gather kernel launch");
  cuda::count_launches(5);  // four gathers and the cuSPARSE solve

  size_t need = 0;
  const int m = static_cast<int>(n), count = static_cast<int>(S);
  if (!inter) {
    check(strided_size(st.handle, m, buf[0], buf[1], buf[2], buf[3], count, &need), "gtsv2StridedBatch_bufferSizeExt");
    void* work = grow(st.work, st.work_bytes, need + 1);
    check(strided(st.handle, m, buf[0], buf[1], buf[2], buf[3], count, work), "gtsv2StridedBatch");
  } else {
    const int algo = a.pivoting ? 1 : 0;
    check(interleaved_size(st.handle, algo, m, buf[0], buf[1], buf[2], buf[3], count, &need),
          "gtsvInterleavedBatch_bufferSizeExt");
    void* work = grow(st.work, st.work_bytes, need + 1);
    check(interleaved(st.handle, algo, m, buf[0], buf[1], buf[2], buf[3], count, work), "gtsvInterleavedBatch");
  }
  check(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), stream), "flag reset");
  if (a.vjp)
    accumulate<T><<<blocks, threads, 0, stream>>>(buf[3], adj, rows, systems, inter, flag);
  else
    scatter<T><<<blocks, threads, 0, stream>>>(static_cast<T*>(a.out), buf[3], off[Op::x], a.step[Op::x],
                                               rows, systems, inter, flag);
  check(cudaGetLastError(), a.vjp ? "adjoint kernel launch" : "scatter kernel launch");
  cuda::count_launches();
  unsigned long long bad = 0;
  check(cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, stream), "flag download");
  check(cudaStreamSynchronize(stream), "solve");
  note_device_wait("tridiagonal_solve", device);
  return bad == ~0ull ? -1 : static_cast<int64_t>(bad);
}

}  // namespace

void register_tridiagonal(KernelTable& t) {
  t.tridiagonal[0] = tridiagonal<double>;
  t.tridiagonal[1] = tridiagonal<float>;
}

}  // namespace tenax::detail::cuda
