// CUDA linear recurrence x_t = a_t x_{t-1} + b_t and its reverse rule: one thread per lane walking
// time serially, as the CPU kernel does per lane. Adjoints shared between lanes (a broadcast a or
// b) are summed per lane in a register and added with one atomic per lane.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

using cuda::use_device_of;
constexpr int kBlock = 128;

// Lane offset arrays on the device for one call (stream-ordered, freed at scope exit).
struct Lanes {
  cuda::Scratch buffer;
  int64_t lanes;
  Lanes(const int64_t* const* host, int k, int64_t lanes_, const char* what)
      : buffer(static_cast<std::size_t>(k * lanes_ + 1) * sizeof(int64_t), what), lanes(lanes_) {
    for (int i = 0; i < k; ++i)
      if (host[i]) cuda::upload(static_cast<int64_t*>(buffer.p) + i * lanes, host[i], lanes, what);
  }
  [[nodiscard]] const int64_t* at(int i) const { return static_cast<const int64_t*>(buffer.p) + i * lanes; }
};

template <class T>
__global__ void recurrence_k(RecurrenceArgs r, const int64_t* oa, const int64_t* ob, const int64_t* ox) {
  const int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (l >= r.lanes) return;
  const T* a = static_cast<const T*>(r.a) + oa[l];
  const T* b = static_cast<const T*>(r.b) + ob[l];
  T* x = static_cast<T*>(r.x) + ox[l];
  T state = T(0);
  for (int64_t t = 0; t < r.steps; ++t) {
    state = a[t * r.step_a] * state + b[t * r.step_b];
    x[t * r.step_x] = state;
  }
}

template <class T>
void recurrence(const RecurrenceArgs& r) {
  if (r.lanes == 0 || r.steps == 0) return;
  use_device_of(r.x, "linear_recurrence");
  const int64_t* host[3] = {r.off_a, r.off_b, r.off_x};
  Lanes lanes(host, 3, r.lanes, "linear_recurrence");
  recurrence_k<T><<<cuda::blocks_for(r.lanes, kBlock), kBlock, 0, cudaStreamPerThread>>>(
      r, lanes.at(0), lanes.at(1), lanes.at(2));
  cuda::check_launch("linear_recurrence");
}

template <class T>
__global__ void recurrence_vjp_k(RecurrenceVjpArgs r, const int64_t* oa, const int64_t* ox, const int64_t* og,
                                 const int64_t* oda, const int64_t* odb) {
  const RecurrenceArgs& f = r.fwd;
  const int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (l >= f.lanes) return;
  const T* al = static_cast<const T*>(f.a) + oa[l];
  const T* xl = static_cast<const T*>(f.x) + ox[l];
  const T* gl = static_cast<const T*>(r.g) + og[l];
  T* dal = r.da ? static_cast<T*>(r.da) + oda[l] : nullptr;
  T* dbl = r.db ? static_cast<T*>(r.db) + odb[l] : nullptr;
  const bool ba = r.step_da == 0, bb = r.step_db == 0;
  T lambda = T(0), a_next = T(0), sum_a = T(0), sum_b = T(0);
  for (int64_t t = f.steps - 1; t >= 0; --t) {
    lambda = gl[t * r.step_g] + a_next * lambda;
    if (dbl) {
      if (bb)
        sum_b += lambda;
      else
        atomicAdd(dbl + t * r.step_db, lambda);  // lanes may share elements
    }
    if (dal && t > 0) {
      const T v = lambda * xl[(t - 1) * f.step_x];
      if (ba)
        sum_a += v;
      else
        atomicAdd(dal + t * r.step_da, v);
    }
    a_next = al[t * f.step_a];
  }
  if (dal && ba) atomicAdd(dal, sum_a);
  if (dbl && bb) atomicAdd(dbl, sum_b);
}

template <class T>
void recurrence_vjp(const RecurrenceVjpArgs& r) {
  if (r.fwd.lanes == 0 || r.fwd.steps == 0) return;
  use_device_of(r.g, "linear_recurrence vjp");
  const int64_t* host[5] = {r.fwd.off_a, r.fwd.off_x, r.off_g, r.off_da, r.off_db};
  Lanes lanes(host, 5, r.fwd.lanes, "linear_recurrence vjp");
  recurrence_vjp_k<T><<<cuda::blocks_for(r.fwd.lanes, kBlock), kBlock, 0, cudaStreamPerThread>>>(
      r, lanes.at(0), lanes.at(1), lanes.at(2), lanes.at(3), lanes.at(4));
  cuda::check_launch("linear_recurrence vjp");
}

}  // namespace

void register_recurrence(KernelTable& t) {
  t.recurrence[0] = recurrence<double>;
  t.recurrence[1] = recurrence<float>;
  t.recurrence_vjp[0] = recurrence_vjp<double>;
  t.recurrence_vjp[1] = recurrence_vjp<float>;
}

}  // namespace tenax::detail::cuda
