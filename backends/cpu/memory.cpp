// CPU data-movement kernels: strided copy, accumulate, fill, scale, cast, select (where), compare.
#include <cstdint>

#include "tenax/backends/cpu/loop.h"
#include "tenax/backends/cpu/register.h"

namespace tenax::cpu {
namespace {

using detail::LoopArg;
using detail::LoopDims;

template <class T>
void copy(const LoopDims& d, const LoopArg* a) {
  for_each<T, T>(d, a, [](T& y, T x) { y = x; });
}
// y += x; marked as a sum so a reduction into one element runs on partial sums (loop.h).
template <class T>
struct AddInto {
  static constexpr bool kSumReduction = true;
  void operator()(T& y, T x) const { y += x; }
};
template <class T>
void acc(const LoopDims& d, const LoopArg* a) {
  for_each<T, T>(d, a, AddInto<T>{});
}
template <class T>
void max_acc(const LoopDims& d, const LoopArg* a) {
  for_each<T, T>(d, a, [](T& y, T x) { y = x > y ? x : y; });
}
template <class T>
void scale(const LoopDims& d, const LoopArg* a) {
  const T s = static_cast<T>(*static_cast<const double*>(a[2].data));
  for_each<T, T>(d, a, [s](T& y, T x) { y = x * s; });
}
template <class T>
void fill(const LoopDims& d, const LoopArg* a) {
  const T v = static_cast<T>(*static_cast<const double*>(a[1].data));
  for_each<T>(d, a, [v](T& y) { y = v; });
}
template <class To, class From>
void cast(const LoopDims& d, const LoopArg* a) {
  for_each<To, From>(d, a, [](To& y, From x) { y = static_cast<To>(x); });
}
template <class T>
void where(const LoopDims& d, const LoopArg* a) {
  for_each<T, bool, T, T>(d, a, [](T& y, bool c, T p, T q) { y = c ? p : q; });
}
template <class T>
void greater(const LoopDims& d, const LoopArg* a) {
  for_each<bool, T, T>(d, a, [](bool& y, T p, T q) { y = p > q; });
}
template <class T>
void less(const LoopDims& d, const LoopArg* a) {
  for_each<bool, T, T>(d, a, [](bool& y, T p, T q) { y = p < q; });
}
template <class T>
void equal(const LoopDims& d, const LoopArg* a) {
  for_each<bool, T, T>(d, a, [](bool& y, T p, T q) { y = p == q; });
}

}  // namespace

void register_memory(detail::KernelTable& t) {
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
  t.compare[0][0] = greater<double>;
  t.compare[0][1] = greater<float>;
  t.compare[1][0] = less<double>;
  t.compare[1][1] = less<float>;
  t.compare[2][0] = equal<double>;
  t.compare[2][1] = equal<float>;
}

}  // namespace tenax::cpu
