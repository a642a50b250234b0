#pragma once
// The baseline of the small-op benchmarks: y <- y * c + c on four elements, `steps` times, and the
// adjoint of sum(y) with respect to c, written by hand (values kept for the reverse pass).
#include <benchmark/benchmark.h>

#include <vector>

namespace tenax::bench {

/// One forward and reverse pass; `ys` is scratch of 4 * (steps + 1) values.
inline void hand_chain(std::vector<double>& ys, int steps) {
  const double c[4] = {0.5, 0.25, 0.125, 1.0};
  for (int i = 0; i < 4; ++i) ys[size_t(i)] = c[i];
  for (int k = 0; k < steps; ++k)
    for (int i = 0; i < 4; ++i) ys[size_t(4 * (k + 1) + i)] = ys[size_t(4 * k + i)] * c[i] + c[i];
  double yb[4] = {1, 1, 1, 1}, cb[4] = {0, 0, 0, 0};
  for (int k = steps - 1; k >= 0; --k)
    for (int i = 0; i < 4; ++i) {
      cb[i] += yb[i] * (ys[size_t(4 * k + i)] + 1.0);
      yb[i] *= c[i];
    }
  for (int i = 0; i < 4; ++i) cb[i] += yb[i];
  benchmark::DoNotOptimize(cb);
}

}  // namespace tenax::bench
