#pragma once
// Shared by the scan tests: a decaying scalar recurrence, and a scan's value and gradient against
// the same loop unrolled on the tape.
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "op_check.h"

namespace tenax::testing {

// x_t = lam * x_{t-1} + u_t; y_t = x_t^2.
inline ScanBody decay_body(const Tensor& lam) {
  return [lam](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = lam * c[0] + x[0];
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{square(next)});
  };
}
// Value and gradient of sum(ys) + sum(final carries) by scan and by the loop unrolled on the tape,
// for a body over carries (init) and one per-step input xs along "t".
inline void expect_scan_matches_unrolled(const ScanBody& body, const std::vector<Tensor>& init, const Tensor& xs,
                                  const ScanOptions& o) {
  const size_t nc = init.size();
  auto total = [nc](const std::vector<Tensor>& carry, const std::vector<Tensor>& ys) {
    Tensor t = scalar(0.0);
    for (size_t k = 0; k < nc; ++k) t = t + sum(carry[k] * carry[k]);
    for (const Tensor& y : ys) t = t + sum(y);
    return t;
  };
  auto by_scan = [&](const std::vector<Tensor>& a) {
    ScanResult r = scan(body, std::vector<Tensor>(a.begin(), a.end() - 1), {a.back()}, "t", o);
    return total(r.carry, r.ys);
  };
  auto unrolled = [&](const std::vector<Tensor>& a) {
    std::vector<Tensor> c(a.begin(), a.end() - 1), ys;
    const int64_t n = a.back().size("t");
    for (int64_t s = 0; s < n; ++s) {
      auto [next, y] = body(c, {select(a.back(), "t", o.reverse ? n - 1 - s : s)});
      for (const Tensor& t : y) ys.push_back(t);
      c = next;
    }
    return total(c, ys);
  };
  std::vector<Tensor> args = init;
  args.push_back(xs);
  auto [v_ref, g_ref] = value_and_grad(unrolled, args);
  auto [v, g] = value_and_grad(by_scan, args);
  EXPECT_NEAR(v.item(), v_ref.item(), 1e-11 * (1 + std::abs(v_ref.item())));
  for (size_t k = 0; k < g.size(); ++k)
    EXPECT_LT(mismatch(g[k], g_ref[k], 1e-10, 1e-12), 1.0)
        << "argument " << k << " checkpoint_every=" << o.checkpoint_every << " reverse=" << o.reverse;
}

// The same with `every` (each checkpoint_every in turn), forwards and in reverse.
inline void expect_scan_matches_unrolled_every_way(const ScanBody& body, const std::vector<Tensor>& init,
                                                   const Tensor& xs, std::initializer_list<int64_t> every) {
  for (int64_t k : every)
    for (bool rev : {false, true}) {
      ScanOptions o;
      o.checkpoint_every = k;
      o.reverse = rev;
      expect_scan_matches_unrolled(body, init, xs, o);
    }
}

}  // namespace tenax::testing
