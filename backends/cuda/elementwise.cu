// CUDA elementwise kernels, expanded from core/ops/elementwise.def like the CPU ones (forward, the
// reverse rules "dst (+)= g * D(...)", copies, casts, fills, comparisons, select, reductions into
// broadcast destinations). One generic grid-stride loop walks up to kMaxLoopRank strided dims; an
// accumulation whose destination has a zero stride over a dim of size > 1 (a reduction) adds with
// atomics. Kernels run on the per-thread default stream of the destination's device, ordered with
// the stream-ordered allocator and the transfers; nothing here synchronises.
#include <cuda/std/complex>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "tenax/backends/cuda/common.h"
#include "tenax/backends/cuda/elementwise_functors.h"
#include "tenax/backends/cuda/loop.cuh"
#include "tenax/backends/cuda/register.h"

namespace tenax::detail::cuda {
namespace {

using cuda::check_launch;
using cuda::use_device_of;
using namespace cuda;  // the functors and loops

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
  rule<F<T>, T, kAcc, 4>(d, in);
}
// Reverse rules of binary ops: args dst, g, a, b, y.
template <template <class> class F, class T, bool kAcc>
void deriv4(const LoopDims& d, const LoopArg* in) {
  rule<F<T>, T, kAcc, 5>(d, in);
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

template <class C>
void register_complex_movement(KernelTable& t, int dt) {
  t.copy[4 + dt] = copy<C>;
  t.acc[2 + dt] = acc<C>;
  t.scale[2 + dt] = scale<C>;
  t.fill[2 + dt] = fill<C>;
  t.where[2 + dt] = where<C>;
  t.deriv_acc[int(DerivOp::one)][2 + dt] = t.complex.tangent_acc[int(DerivOp::one)][dt] = deriv_one<C, true>;
  t.deriv_set[int(DerivOp::one)][2 + dt] = t.complex.tangent_set[int(DerivOp::one)][dt] = deriv_one<C, false>;
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
  // The complex dtypes' data movement and "dst (+)= g" rule (dtype indices 2, 3; copies 4, 5; the
  // rule's JVP form is the same): these kernels on cuda::std::complex. Their arithmetic:
  // complex.cu.
  register_complex_movement<::cuda::std::complex<double>>(t, 0);
  register_complex_movement<::cuda::std::complex<float>>(t, 1);
}

}  // namespace tenax::detail::cuda
