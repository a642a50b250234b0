// CPU linear recurrence x_t = a_t x_{t-1} + b_t and its O(T) reverse rule (a reverse-time
// recurrence), lane by lane, with time the inner loop (one fused multiply-add per step). Complex
// lanes run the same loops; their reverse rule reads conj(a) and conj(x) (docs/complex.md).
#include <complex>
#include <type_traits>

#include "tenax/backends/cpu/register.h"

namespace tenax::cpu {
namespace {

template <class T>
inline T conj_of(T v) {
  if constexpr (std::is_floating_point_v<T>) return v;
  else return std::conj(v);
}

using detail::RecurrenceArgs;
using detail::RecurrenceVjpArgs;

template <class T>
void recurrence(const RecurrenceArgs& r) {
  const T* a = static_cast<const T*>(r.a);
  const T* b = static_cast<const T*>(r.b);
  T* x = static_cast<T*>(r.x);
  for (int64_t l = 0; l < r.lanes; ++l) {
    const T* al = a + r.off_a[l];
    const T* bl = b + r.off_b[l];
    T* xl = x + r.off_x[l];
    T state = T(0);
    for (int64_t t = 0; t < r.steps; ++t) {
      state = al[t * r.step_a] * state + bl[t * r.step_b];
      xl[t * r.step_x] = state;
    }
  }
}

// One lane of the reverse rule. A broadcast adjoint (step 0) is summed in a register and added
// once at the end: accumulating through memory would put a store-to-load chain on every step.
template <class T, bool kBroadcastA, bool kBroadcastB>
void vjp_lane(const RecurrenceVjpArgs& r, int64_t l) {
  const RecurrenceArgs& f = r.fwd;
  const T* al = static_cast<const T*>(f.a) + f.off_a[l];
  const T* xl = static_cast<const T*>(f.x) + f.off_x[l];
  const T* gl = static_cast<const T*>(r.g) + r.off_g[l];
  T* dal = r.da ? static_cast<T*>(r.da) + r.off_da[l] : nullptr;
  T* dbl = r.db ? static_cast<T*>(r.db) + r.off_db[l] : nullptr;
  T lambda = T(0), a_next = T(0), sum_a = T(0), sum_b = T(0);
  for (int64_t t = f.steps - 1; t >= 0; --t) {
    lambda = gl[t * r.step_g] + a_next * lambda;
    if (dbl) {
      if constexpr (kBroadcastB) sum_b += lambda;
      else dbl[t * r.step_db] += lambda;
    }
    if (dal && t > 0) {
      if constexpr (kBroadcastA) sum_a += lambda * conj_of(xl[(t - 1) * f.step_x]);
      else dal[t * r.step_da] += lambda * conj_of(xl[(t - 1) * f.step_x]);
    }
    a_next = conj_of(al[t * f.step_a]);
  }
  if constexpr (kBroadcastA) if (dal) *dal += sum_a;
  if constexpr (kBroadcastB) if (dbl) *dbl += sum_b;
}

template <class T>
void recurrence_vjp(const RecurrenceVjpArgs& r) {
  const bool ba = r.step_da == 0, bb = r.step_db == 0;
  for (int64_t l = 0; l < r.fwd.lanes; ++l) {
    if (ba && bb) vjp_lane<T, true, true>(r, l);
    else if (ba) vjp_lane<T, true, false>(r, l);
    else if (bb) vjp_lane<T, false, true>(r, l);
    else vjp_lane<T, false, false>(r, l);
  }
}

}  // namespace

void register_recurrence(detail::KernelTable& t) {
  t.recurrence[0] = recurrence<double>;
  t.recurrence[1] = recurrence<float>;
  t.recurrence_vjp[0] = recurrence_vjp<double>;
  t.recurrence_vjp[1] = recurrence_vjp<float>;
  t.recurrence[2] = recurrence<std::complex<double>>;
  t.recurrence[3] = recurrence<std::complex<float>>;
  t.recurrence_vjp[2] = recurrence_vjp<std::complex<double>>;
  t.recurrence_vjp[3] = recurrence_vjp<std::complex<float>>;
}

}  // namespace tenax::cpu
