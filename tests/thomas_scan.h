#pragma once
// The Thomas algorithm written with tenax::scan: a forward sweep over the rows carrying (c', d'),
// then a reverse sweep carrying x_{i+1}; vectorised over every other axis. The reference that the
// tridiagonal tests differentiate through and that bench_tridiagonal times against the op.
#include <utility>
#include <vector>

#include <tenax/tenax.h>

namespace tenax::testing {

/// x solving the tridiagonal systems along `over` (rows become the outermost axis of x).
inline Tensor thomas_by_scan(const Tensor& lower, const Tensor& diag, const Tensor& upper, const Tensor& rhs,
                             Name over) {
  Axes batch = rhs.axes();
  batch.erase(batch.index_of(over));
  ScanResult fwd = scan(
      [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        Tensor denom = x[1] - x[0] * c[0];
        Tensor cp = x[2] / denom;
        Tensor dp = (x[3] - x[0] * c[1]) / denom;
        return std::make_pair(std::vector<Tensor>{cp, dp}, std::vector<Tensor>{cp, dp});
      },
      {zeros(batch), zeros(batch)}, {lower, diag, upper, rhs}, over);
  ScanOptions rev;
  rev.reverse = true;
  ScanResult back = scan(
      [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        Tensor xi = x[1] - x[0] * c[0];
        return std::make_pair(std::vector<Tensor>{xi}, std::vector<Tensor>{xi});
      },
      {zeros(batch)}, {fwd.ys[0], fwd.ys[1]}, over, rev);
  return back.ys[0];
}

}  // namespace tenax::testing
