// CPU linear recurrence x_t = a_t x_{t-1} + b_t and its O(T) reverse rule (a reverse-time
// recurrence), lane by lane, with time the inner loop (one fused multiply-add per step). Complex
// lanes run the same loops; their reverse rule reads conj(a) and conj(x) (docs/complex.md).
#include <algorithm>
#include <complex>
#include <type_traits>

#include "tenax/backends/cpu/product.h"
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

// Lanes in blocks of kBlock with time the OUTER loop, where time is not the innermost axis of
// the result (|step| > 1): consecutive lanes then sit side by side in memory and each step reads
// and writes whole cache lines, where a lane at a time touches one line per step (a (t, h, basis)
// cotangent of a Jacobian: 4 096 lanes, 512 steps). Each lane computes exactly what it computes
// alone, in the same order: the same bits.
constexpr int64_t kBlock = 64;

template <class T>
void recurrence_blocked(const RecurrenceArgs& r) {
  const T* a = static_cast<const T*>(r.a);
  const T* b = static_cast<const T*>(r.b);
  T* x = static_cast<T*>(r.x);
  T state[kBlock];
  for (int64_t l0 = 0; l0 < r.lanes; l0 += kBlock) {
    const int64_t nb = std::min(kBlock, r.lanes - l0);
    const int64_t *oa = r.off_a + l0, *ob = r.off_b + l0, *ox = r.off_x + l0;
    for (int64_t j = 0; j < nb; ++j) state[j] = T(0);
    for (int64_t t = 0; t < r.steps; ++t) {
      const T* at = a + t * r.step_a;
      const T* bt = b + t * r.step_b;
      T* xt = x + t * r.step_x;
      for (int64_t j = 0; j < nb; ++j) {
        state[j] = prod(at[oa[j]], state[j]) + bt[ob[j]];
        xt[ox[j]] = state[j];
      }
    }
  }
}

template <class T>
void recurrence(const RecurrenceArgs& r) {
  if (r.lanes > 1 && (r.step_x > 1 || r.step_x < -1)) return recurrence_blocked<T>(r);
  const T* a = static_cast<const T*>(r.a);
  const T* b = static_cast<const T*>(r.b);
  T* x = static_cast<T*>(r.x);
  for (int64_t l = 0; l < r.lanes; ++l) {
    const T* al = a + r.off_a[l];
    const T* bl = b + r.off_b[l];
    T* xl = x + r.off_x[l];
    T state = T(0);
    for (int64_t t = 0; t < r.steps; ++t) {
      state = prod(al[t * r.step_a], state) + bl[t * r.step_b];
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
    lambda = gl[t * r.step_g] + prod(a_next, lambda);
    if (dbl) {
      if constexpr (kBroadcastB) sum_b += lambda;
      else dbl[t * r.step_db] += lambda;
    }
    if (dal && t > 0) {
      if constexpr (kBroadcastA) sum_a += prod_conj(lambda, xl[(t - 1) * f.step_x]);
      else dal[t * r.step_da] += prod_conj(lambda, xl[(t - 1) * f.step_x]);
    }
    a_next = conj_of(al[t * f.step_a]);
  }
  if constexpr (kBroadcastA) if (dal) *dal += sum_a;
  if constexpr (kBroadcastB) if (dbl) *dbl += sum_b;
}

// The reverse rule on lanes [l0, l0 + nb) with time the outer loop (as recurrence_blocked): each
// lane's operations in its own order; broadcast adjoints' sums added at the end in lane order.
template <class T, bool kBroadcastA, bool kBroadcastB>
void vjp_block(const RecurrenceVjpArgs& r, int64_t l0, int64_t nb) {
  const RecurrenceArgs& f = r.fwd;
  const T* a = static_cast<const T*>(f.a);
  const T* x = static_cast<const T*>(f.x);
  const T* g = static_cast<const T*>(r.g);
  T* da = static_cast<T*>(r.da);
  T* db = static_cast<T*>(r.db);
  const int64_t *oa = f.off_a + l0, *ox = f.off_x + l0, *og = r.off_g + l0;
  const int64_t* oda = da ? r.off_da + l0 : nullptr;
  const int64_t* odb = db ? r.off_db + l0 : nullptr;
  T lambda[kBlock], a_next[kBlock], sum_a[kBlock], sum_b[kBlock];
  for (int64_t j = 0; j < nb; ++j) lambda[j] = a_next[j] = sum_a[j] = sum_b[j] = T(0);
  for (int64_t t = f.steps - 1; t >= 0; --t) {
    for (int64_t j = 0; j < nb; ++j) {
      lambda[j] = g[og[j] + t * r.step_g] + prod(a_next[j], lambda[j]);
      if (db) {
        if constexpr (kBroadcastB) sum_b[j] += lambda[j];
        else db[odb[j] + t * r.step_db] += lambda[j];
      }
      if (da && t > 0) {
        const T v = prod_conj(lambda[j], x[ox[j] + (t - 1) * f.step_x]);
        if constexpr (kBroadcastA) sum_a[j] += v;
        else da[oda[j] + t * r.step_da] += v;
      }
      a_next[j] = conj_of(a[oa[j] + t * f.step_a]);
    }
  }
  for (int64_t j = 0; j < nb; ++j) {
    if constexpr (kBroadcastA) if (da) da[oda[j]] += sum_a[j];
    if constexpr (kBroadcastB) if (db) db[odb[j]] += sum_b[j];
  }
}

// Whether lanes [l0, l0 + nb) of an adjoint that has the time axis write distinct elements
// (strictly increasing offsets), so that running them side by side changes no sum's order.
bool distinct(const int64_t* off, int64_t step, int64_t l0, int64_t nb) {
  if (!off || step == 0) return true;
  for (int64_t j = 1; j < nb; ++j)
    if (off[l0 + j] <= off[l0 + j - 1]) return false;
  return true;
}

template <class T>
void recurrence_vjp(const RecurrenceVjpArgs& r) {
  const bool ba = r.step_da == 0, bb = r.step_db == 0;
  const bool time_outer = r.fwd.step_x > 1 || r.fwd.step_x < -1 || r.step_g > 1 || r.step_g < -1;
  for (int64_t l0 = 0; l0 < r.fwd.lanes; l0 += kBlock) {
    const int64_t nb = std::min(kBlock, r.fwd.lanes - l0);
    if (time_outer && nb > 1 && distinct(r.da ? r.off_da : nullptr, r.step_da, l0, nb) &&
        distinct(r.db ? r.off_db : nullptr, r.step_db, l0, nb)) {
      if (ba && bb) vjp_block<T, true, true>(r, l0, nb);
      else if (ba) vjp_block<T, true, false>(r, l0, nb);
      else if (bb) vjp_block<T, false, true>(r, l0, nb);
      else vjp_block<T, false, false>(r, l0, nb);
      continue;
    }
    for (int64_t l = l0; l < l0 + nb; ++l) {
      if (ba && bb) vjp_lane<T, true, true>(r, l);
      else if (ba) vjp_lane<T, true, false>(r, l);
      else if (bb) vjp_lane<T, false, true>(r, l);
      else vjp_lane<T, false, false>(r, l);
    }
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
