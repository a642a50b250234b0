// libFuzzer target for the C++ API: fuzz bytes choose a short sequence of op calls, each from its
// op's own sampler (a valid call, as the generic op tests make), and then perhaps break it: an
// attribute set to an extreme integer or an unknown axis, an input broadcast past the element
// limit, an empty slice, NaNs, the other float dtype. Each call runs under a tape and is
// differentiated. Every outcome must be a value or a tenax::Error; an untouched call must also
// agree with the same op on the same values in a scrambled layout (transposed, strided), the
// per-op reference of tests/test_ops_generic.cpp. Built only with -DTENAX_FUZZ=ON (scripts/fuzz.sh).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <tenax/tenax.h>

#include "tenax/core/ops/dispatch.h"

namespace {
using namespace tenax;

constexpr int64_t kBudget = int64_t{16} << 20;
const bool g_budget = [] {
  set_memory_budget(Device::cpu(), kBudget);
  return true;
}();

// The same values in another layout: axes in reverse order, every other element of a buffer.
Tensor scrambled(const Tensor& t) {
  if (t.rank() == 0 || !is_floating(t.dtype())) return t;
  AxisList reversed;
  for (int i = t.rank() - 1; i >= 0; --i) reversed.push_back(t.axes().name(i));
  const Tensor pair = stack({t, t}, "fuzz_pad");
  AxisList pad_last = reversed;
  pad_last.push_back(Name("fuzz_pad"));
  return select(contiguous(transpose(pair, pad_last)), "fuzz_pad", 0);
}

// Another layout may sum in another order: agreement to a few units in the last place of the
// dtype, relative to the largest magnitude (a contraction's terms may cancel).
void agree_or_abort(const OpDef& op, const Tensor& y, const Tensor& ref) {
  const AxisList order = ref.axes().names();
  const std::vector<double> a = y.to_vector(order), b = ref.to_vector(order);
  const double tol = y.dtype() == DType::f32 ? 1e-4 : 1e-10;
  double scale = 1.0;
  for (double v : b)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  for (size_t k = 0; k < a.size(); ++k) {
    const bool both_nan = std::isnan(a[k]) && std::isnan(b[k]);
    if (!both_nan && a[k] != b[k] && !(std::abs(a[k] - b[k]) <= tol * scale)) {
      std::fprintf(stderr, "[%s] element %zu: %.17g in the sampled layout, %.17g scrambled\n", op.name, k, a[k], b[k]);
      std::abort();
    }
  }
}

// Breaks a sampled call in one of several ways; returns false when it left the call as it was.
bool mutate(FuzzedDataProvider& p, OpSample& s) {
  static constexpr int64_t kIntegers[] = {-1, INT64_MIN, INT64_MAX, int64_t{1} << 40, int64_t{1} << 62, 0};
  switch (p.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: s.attrs.i[p.ConsumeIntegralInRange<int>(0, 3)] = p.PickValueInArray(kIntegers); return true;
    case 1: {
      AxisList names;
      names.push_back(Name(p.ConsumeBool() ? "zz" : "fuzz_pad"));
      s.attrs.axes = names;
      return true;
    }
    case 2:
      if (!s.inputs.empty()) {
        // Views whose element count passes kMaxElements only with the input's own axes: the
        // broadcast (or the op) must refuse them. Smaller ones would be valid and slow, not wrong.
        const Axes huge{{"h1", int64_t{1} << p.ConsumeIntegralInRange<int>(20, 28)},
                        {"h2", int64_t{1} << p.ConsumeIntegralInRange<int>(20, 28)}};
        if (s.inputs[0].numel() > kMaxElements / huge.numel()) {
          s.inputs[0] = broadcast(s.inputs[0], huge);
          return true;
        }
      }
      return false;
    case 3:
      if (!s.inputs.empty() && s.inputs[0].rank() > 0) {
        s.inputs[0] = slice(s.inputs[0], s.inputs[0].axes().name(0), 0, 0);
        return true;
      }
      return false;
    case 4:
      if (!s.inputs.empty() && is_floating(s.inputs[0].dtype())) {
        s.inputs[0] = s.inputs[0] * std::numeric_limits<double>::quiet_NaN();
        return true;
      }
      return false;
    case 5:
      if (!s.inputs.empty() && is_floating(s.inputs[0].dtype())) {
        s.inputs[0] = astype(s.inputs[0], s.inputs[0].dtype() == DType::f64 ? DType::f32 : DType::f64);
        return true;
      }
      return false;
    default: return false;
  }
}

void call(FuzzedDataProvider& p) {
  const auto& ops = registered_ops();
  const OpDef& op = *ops[p.ConsumeIntegralInRange<size_t>(0, ops.size() - 1)];
  SampleRng rng(p.ConsumeIntegral<uint64_t>());
  OpSample s = op.sample(rng, p.ConsumeBool() ? DType::f64 : DType::f32);
  const bool broken = mutate(p, s);
  Tape tape;
  std::vector<Tensor> in, watched;
  for (const Tensor& t : s.inputs) {
    in.push_back(is_floating(t.dtype()) ? tape.watch(t) : t);
    if (is_floating(t.dtype())) watched.push_back(in.back());
  }
  const Tensor y = detail::apply(op, in, s.attrs);
  if (!broken) {
    std::vector<Tensor> other;
    for (const Tensor& t : s.inputs) other.push_back(scrambled(t));
    agree_or_abort(op, y, detail::apply(op, other, s.attrs));
  }
  if (op.vjp && is_floating(y.dtype()) && !watched.empty()) (void)tape.gradient(sum(astype(y, DType::f64)), watched);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)g_budget;
  FuzzedDataProvider p(data, size);
  const int calls = p.ConsumeIntegralInRange<int>(1, 4);
  for (int k = 0; k < calls && p.remaining_bytes() > 0; ++k) {
    try {
      call(p);
    } catch (const Error&) {
      // the documented outcome for a broken call
    }
  }
  return 0;
}
