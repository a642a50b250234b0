#pragma once
// Device functors of the elementwise kernels (nvcc only): the values computed from the inputs,
// expanded from core/ops/elementwise.def; the store mode is the kernel's. Shared by the plain
// kernels (elementwise.cu) and the fused chains of recorded programs (fusion.cu).
#include <cmath>

#ifndef __CUDACC__
#error "elementwise_functors.h is for CUDA sources"
#endif

namespace tenax::detail::cuda {

#define TENAX_UNARY(name, f, df, saves)                                                                 \
  template <class T>                                                                                    \
  struct Fwd_##name {                                                                                   \
    __device__ T operator()(T x) const { return (f); }                                                  \
  };                                                                                                    \
  template <class T>                                                                                    \
  struct D_##name {                                                                                     \
    __device__ T operator()(T g, [[maybe_unused]] T x, [[maybe_unused]] T y) const { return g * (df); } \
  };
#include "tenax/core/ops/elementwise.def"

#define TENAX_BINARY(name, f, dfa, dfb, saves)                                                             \
  template <class T>                                                                                       \
  struct Fwd_##name {                                                                                      \
    __device__ T operator()(T a, T b) const { return (f); }                                                \
  };                                                                                                       \
  template <class T>                                                                                       \
  struct D_##name##_a {                                                                                    \
    __device__ T operator()(T g, [[maybe_unused]] T a, [[maybe_unused]] T b, [[maybe_unused]] T y) const { \
      return g * (dfa);                                                                                    \
    }                                                                                                      \
  };                                                                                                       \
  template <class T>                                                                                       \
  struct D_##name##_b {                                                                                    \
    __device__ T operator()(T g, [[maybe_unused]] T a, [[maybe_unused]] T b, [[maybe_unused]] T y) const { \
      return g * (dfb);                                                                                    \
    }                                                                                                      \
  };
#include "tenax/core/ops/elementwise.def"

template <class T>
struct Identity {
  __device__ T operator()(T x) const { return x; }
};
template <class T>
struct DOne {
  __device__ T operator()(T g) const { return g; }
};
template <class T>
struct DArgmaxMask {
  __device__ T operator()(T g, T x, T y) const { return x == y ? g : T(0); }
};
template <class T>
struct DSoftmax {
  __device__ T operator()(T g, T x, T y) const { return g * exp(x - y); }
};
template <class To, class From>
struct Cast {
  __device__ To operator()(From x) const { return static_cast<To>(x); }
};
template <class T>
struct Scaled {
  T s;
  __device__ T operator()(T x) const { return x * s; }
};
template <class T>
struct Constant {
  T v;
  __device__ T operator()() const { return v; }
};
template <class T>
struct Select {
  __device__ T operator()(bool c, T p, T q) const { return c ? p : q; }
};
template <class T>
struct Greater {
  __device__ bool operator()(T p, T q) const { return p > q; }
};
template <class T>
struct Less {
  __device__ bool operator()(T p, T q) const { return p < q; }
};
template <class T>
struct Equal {
  __device__ bool operator()(T p, T q) const { return p == q; }
};

}  // namespace tenax::detail::cuda
