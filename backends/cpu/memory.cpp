// CPU data-movement kernels: strided copy, accumulate, fill, scale, cast, select (where), compare;
// each with its flat twin.
#include <tbb/task_arena.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/register.h"
#include "tenax/backends/cpu/transpose_copy.h"

namespace tenax::cpu {
namespace {

using detail::LoopArg;
using detail::LoopDims;

template <class T>
struct Copy {
  void operator()(T& y, T x) const { y = x; }
  // A contiguous row of complex numbers is copied as its parts (the compiler vectorises that loop,
  // not the one over std::complex).
  static constexpr bool kRows = !std::is_arithmetic_v<T>;
  static int64_t rows(int64_t n, std::tuple<T*, T*> p, const int64_t* s) {
    if (s[0] != 1 || s[1] != 1) return 0;
    using R = typename T::value_type;
    auto* y = reinterpret_cast<R*>(std::get<0>(p));
    const auto* x = reinterpret_cast<const R*>(std::get<1>(p));
    for (int64_t i = 0; i < 2 * n; ++i) y[i] = x[i];
    return n;
  }
};
// y += x; marked as a sum so a reduction into one element runs on partial sums (loop.h).
template <class T>
struct AddInto {
  static constexpr bool kSumReduction = true;
  void operator()(T& y, T x) const { y += x; }
};
template <class T>
struct MaxInto {
  void operator()(T& y, T x) const { y = x > y ? x : y; }
};
template <class To, class From>
struct Cast {
  void operator()(To& y, From x) const { y = static_cast<To>(x); }
};
template <class T>
struct Where {
  void operator()(T& y, bool c, T p, T q) const { y = c ? p : q; }
};
template <class T>
struct Greater {
  void operator()(bool& y, T p, T q) const { y = p > q; }
};
template <class T>
struct Less {
  void operator()(bool& y, T p, T q) const { y = p < q; }
};
template <class T>
struct Equal {
  void operator()(bool& y, T p, T q) const { y = p == q; }
};

// The two kernels with a scalar operand (a double, whatever T is; a complex T's real part): args[2]
// for scale, args[1] for fill.
template <class T>
struct Scale {
  static void run(const LoopDims& d, const LoopArg* a) {
    const T s = static_cast<T>(*static_cast<const double*>(a[2].data));
    for_each<T, T>(d, a, [s](T& y, T x) { y = x * s; });
  }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) {
    const T s = static_cast<T>(*static_cast<const double*>(a[2].data));
    for_flat<T, T>(outer, n, a, [s](T& y, T x) { y = x * s; });
  }
  static void one(void* const* p) {
    *static_cast<T*>(p[0]) = *static_cast<const T*>(p[1]) * static_cast<T>(*static_cast<const double*>(p[2]));
  }
};
// The element count when the first N operands each cover one dense row-major block (loop.h's
// flat_strides, unit stride) that one thread moves, else -1 (a block of 2 kParallelGrain elements
// or more with a second thread to help takes the parallel loop).
template <int N>
int64_t dense_count(const LoopDims& d, const LoopArg* a) {
  int64_t kind[N];
  if (!loop_detail::flat_strides<N>(d, a, kind)) return -1;
  int64_t n = 1;
  for (int k = 0; k < d.rank; ++k) n *= d.sizes[k];
  for (int i = 0; i < N; ++i)
    if (kind[i] != 1 && n > 1) return -1;
  if (n >= 2 * kParallelGrain && tbb::this_task_arena::max_concurrency() > 1) return -1;
  return n;
}

template <class T>
struct Fill {
  static void run(const LoopDims& d, const LoopArg* a) {
    const double value = *static_cast<const double*>(a[1].data);
    const T v = static_cast<T>(value);
    // A zero fill of a dense block (a new zero tensor, a partial adjoint's slices) as memset.
    if (value == 0.0 && !std::signbit(value))
      if (const int64_t n = dense_count<1>(d, a); n >= 0) {
        std::memset(a[0].data, 0, static_cast<size_t>(n) * sizeof(T));
        return;
      }
    for_each<T>(d, a, [v](T& y) { y = v; });
  }
  static void flat(int64_t outer, int64_t n, const detail::FlatArg* a) {
    const T v = static_cast<T>(*static_cast<const double*>(a[1].data));
    for_flat<T>(outer, n, a, [v](T& y) { y = v; });
  }
  static void one(void* const* p) {
    *static_cast<T*>(p[0]) = static_cast<T>(*static_cast<const double*>(p[1]));
  }
};

// Copies: a transposing copy of floats runs in blocked tiles, one of long strided rows row by row
// (transpose_copy.h), others as loops.
template <class T>
struct CopyKernel {
  static void run(const LoopDims& d, const LoopArg* a) {
    if (const int64_t n = dense_count<2>(d, a); n >= 0) {  // one dense block each
      std::memmove(a[0].data, a[1].data, static_cast<size_t>(n) * sizeof(T));
      return;
    }
    if constexpr (std::is_floating_point_v<T>)
      if (transpose_copy<T>(d, a) || rows_copy<T>(d, a)) return;
    for_each<T, T>(d, a, Copy<T>{});
  }
  static void into(detail::KernelTable& t, detail::ElementwiseFn& entry) {
    t.set(entry, &run, &Kernel<Copy<T>, T, T>::flat, &Kernel<Copy<T>, T, T>::one);
  }
};

template <template <class> class K, class T>
void with_scalar(detail::KernelTable& t, detail::ElementwiseFn& entry) {
  t.set(entry, &K<T>::run, &K<T>::flat, &K<T>::one);
}

}  // namespace

void register_memory(detail::KernelTable& t) {
  CopyKernel<double>::into(t, t.copy[0]);
  CopyKernel<float>::into(t, t.copy[1]);
  Kernel<Copy<int64_t>, int64_t, int64_t>::into(t, t.copy[2]);
  Kernel<Copy<bool>, bool, bool>::into(t, t.copy[3]);
  Kernel<AddInto<double>, double, double>::into(t, t.acc[0]);
  Kernel<AddInto<float>, float, float>::into(t, t.acc[1]);
  Kernel<MaxInto<double>, double, double>::into(t, t.max_acc[0]);
  Kernel<MaxInto<float>, float, float>::into(t, t.max_acc[1]);
  with_scalar<Scale, double>(t, t.scale[0]);
  with_scalar<Scale, float>(t, t.scale[1]);
  with_scalar<Fill, double>(t, t.fill[0]);
  with_scalar<Fill, float>(t, t.fill[1]);
  Kernel<Cast<float, double>, float, double>::into(t, t.cast_f64_f32);
  Kernel<Cast<double, float>, double, float>::into(t, t.cast_f32_f64);
  Kernel<Where<double>, double, bool, double, double>::into(t, t.where[0]);
  Kernel<Where<float>, float, bool, float, float>::into(t, t.where[1]);
  Kernel<Greater<double>, bool, double, double>::into(t, t.compare[0][0]);
  Kernel<Greater<float>, bool, float, float>::into(t, t.compare[0][1]);
  Kernel<Less<double>, bool, double, double>::into(t, t.compare[1][0]);
  Kernel<Less<float>, bool, float, float>::into(t, t.compare[1][1]);
  Kernel<Equal<double>, bool, double, double>::into(t, t.compare[2][0]);
  Kernel<Equal<float>, bool, float, float>::into(t, t.compare[2][1]);
  // The complex dtypes (dtype indices 2, 3; copies 4, 5): the same kernels on std::complex.
  using C128 = std::complex<double>;
  using C64 = std::complex<float>;
  CopyKernel<C128>::into(t, t.copy[4]);
  CopyKernel<C64>::into(t, t.copy[5]);
  Kernel<AddInto<C128>, C128, C128>::into(t, t.acc[2]);
  Kernel<AddInto<C64>, C64, C64>::into(t, t.acc[3]);
  with_scalar<Scale, C128>(t, t.scale[2]);
  with_scalar<Scale, C64>(t, t.scale[3]);
  with_scalar<Fill, C128>(t, t.fill[2]);
  with_scalar<Fill, C64>(t, t.fill[3]);
  Kernel<Where<C128>, C128, bool, C128, C128>::into(t, t.where[2]);
  Kernel<Where<C64>, C64, bool, C64, C64>::into(t, t.where[3]);
}

}  // namespace tenax::cpu
