#pragma once
// Library-internal: what a kernel family's capture rule is written with. Each family that adds a
// kernel entry to the KernelTable declares beside its op (core/ops/<family>.cpp) a capture rule: a
// trampoline that runs the real kernel and records the call with copies of its argument blocks,
// installed into the capturing table by install_<family>_capture (core/ops/families.h).
// test_replay fails naming any kernel entry left without one.
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "tenax/backends/kernels.h"
#include "tenax/core/dtype.h"
#include "tenax/core/ops/capture.h"

namespace tenax::detail {

/// Replaces a non-null kernel entry by its capture rule.
template <class F>
void swap_in(F& entry, F rule) {
  if (entry) entry = rule;
}

// Offsets arrays of a batched matrix call, owned by the recorded call.
struct BatchCopy {
  std::vector<int64_t> a, b, c;
  int64_t count = 0;
  explicit BatchCopy(const MatBatch& m) : count(m.count) {
    auto take = [&](const int64_t* p, std::vector<int64_t>& v) {
      if (p) v.assign(p, p + m.count);
    };
    take(m.offsets_a, a);
    take(m.offsets_b, b);
    take(m.offsets_c, c);
  }
  [[nodiscard]] MatBatch view() const {
    return {count, a.empty() ? nullptr : a.data(), b.empty() ? nullptr : b.data(), c.empty() ? nullptr : c.data()};
  }
};

// Lane offsets of a recurrence call (and of its VJP's cotangent and adjoints), owned by the
// recorded call.
struct LaneCopy {
  std::vector<int64_t> v[6];
  void take(int k, const int64_t* p, int64_t n) {
    if (p) v[k].assign(p, p + n);
  }
  [[nodiscard]] const int64_t* at(int k) const { return v[k].empty() ? nullptr : v[k].data(); }
  void take_forward(const RecurrenceArgs& r) {
    take(0, r.off_a, r.lanes);
    take(1, r.off_b, r.lanes);
    take(2, r.off_x, r.lanes);
  }
  void bind_forward(RecurrenceArgs& r) const {
    r.off_a = at(0);
    r.off_b = at(1);
    r.off_x = at(2);
  }
};

// A device batch for replays: the offsets and a failure word (LLONG_MAX: none) in device memory
// owned by the recorded call; the word is registered with the program (KernelProgram::finish).
struct DeviceBatch {
  std::shared_ptr<void> block;
  MatBatch view;
};
DeviceBatch device_batch(const MatBatch& b, const void* near, const char* kernel);

// Records a batched matrix call: on the host with its own copy of the offsets; on a device as a
// deferred, graph-safe call on device offsets. `call(batch)` runs the kernel.
// `touched`: the base pointers of its tensors (KernelCapture::touches).
template <int Dev, class Call>
int64_t record_matrix_call(const MatBatch& b, const void* near, const char* kernel, Call call,
                           std::initializer_list<const void*> touched) {
  if constexpr (Dev == 1) {
    auto d = device_batch(b, near, kernel);
    return g_capture->other([&] { return call(b); }, kernel, true, near, [call, d] { return call(d.view); });
  } else {
    const int64_t r = g_capture->other([call, bc = BatchCopy(b)] { return call(bc.view()); }, kernel);
    g_capture->touches(touched);
    return r;
  }
}

// A host call on ONE matrix that the backend resolves (MatPlan): its matrix offsets folded into
// the views (a, r and b, c by the batch's offsets a, b, c), run and recorded as such. False:
// the backend has no resolved form (or the call is batched, or on a device): record the call.
template <int Dev, int Dt>
bool record_matrix_plan(MatKind kind, MatPlan p, const MatBatch& b, const char* kernel,
                        std::initializer_list<const void*> touched, int64_t& result) {
  if constexpr (Dev == 1 || Dt >= 2) {  // no resolved forms on devices or for complex matrices
    return false;
  } else {
    const MatPlanFn plan_of = real_kernels(0).mat_plan[Dt];
    if (!plan_of || b.count != 1) return false;
    const auto item = static_cast<int64_t>(itemsize(Dt == 0 ? DType::f64 : DType::f32));  // float_index order
    auto shift = [&](void*& data, const int64_t* offsets) {
      if (offsets && data) data = static_cast<char*>(data) + offsets[0] * item;
    };
    shift(p.a.data, b.offsets_a);
    shift(p.b.data, b.offsets_b);
    shift(p.c.data, b.offsets_c);
    shift(p.r.data, b.offsets_b);
    if (!plan_of(kind, p)) return false;
    result = g_capture->matrix(p, kernel, touched);
    return true;
  }
}

}  // namespace tenax::detail
