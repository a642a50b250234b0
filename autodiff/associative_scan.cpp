// associative_scan by recursive doubling: level d combines every element with the one d earlier.
#include "tenax/autodiff/associative_scan.h"

#include <optional>

#include "tenax/autodiff/nmap.h"
#include "tenax/core/distributed.h"
#include "tenax/core/ops.h"

namespace tenax {

std::vector<Tensor> associative_scan(const AssociativeFn& combine, const std::vector<Tensor>& elems, Name over,
                                     ScanDirection direction) {
  const bool reverse = direction == ScanDirection::reverse;
  if (elems.empty()) throw Error("[associative_scan] no elements to scan");
  int64_t n = -1;
  for (size_t k = 0; k < elems.size(); ++k) {
    const Tensor& e = elems[k];
    if (!e.defined()) throw Error("[associative_scan] element " + std::to_string(k) + " is undefined");
    if (!e.has_axis(over))
      throw AxisError("[associative_scan] element " + std::to_string(k) + " " + e.axes().describe() +
                      " has no axis '" + over.str() + "'");
    if (const std::optional<ShardInfo> split = sharding(e); split && split->axis == over)
      throw AxisError("[associative_scan] over the axis '" + over.str() + "', which is sharded across " +
                      std::to_string(split->comm.size()) +
                      " ranks: the scan needs the whole axis on one rank; shard another axis, or gather this one");
    if (n >= 0 && e.size(over) != n)
      throw ShapeError("[associative_scan] element " + std::to_string(k) + " " + e.axes().describe() + " has " +
                       std::to_string(e.size(over)) + " steps along '" + over.str() + "' but element 0 has " +
                       std::to_string(n));
    n = e.size(over);
  }
  const size_t m = elems.size();
  MultiFunction pairwise = [&](const std::vector<Tensor>& ab) {
    std::vector<Tensor> a(ab.begin(), ab.begin() + static_cast<std::ptrdiff_t>(m));
    std::vector<Tensor> b(ab.begin() + static_cast<std::ptrdiff_t>(m), ab.end());
    std::vector<Tensor> c = reverse ? combine(b, a) : combine(a, b);
    if (c.size() != m)
      throw ShapeError("[associative_scan] combine returned " + std::to_string(c.size()) + " tensors for elements of " +
                       std::to_string(m));
    return c;
  };
  std::vector<Tensor> x = elems;
  for (int64_t d = 1; d < n; d *= 2) {
    // Forwards: x_t <- x_{t-d} ⊕ x_t for t >= d. Reverse: x_t <- x_t ⊕ x_{t+d} for t < n - d.
    std::vector<Tensor> args;
    for (const Tensor& t : x) args.push_back(slice(t, over, 0, n - d));
    for (const Tensor& t : x) args.push_back(slice(t, over, d, n));
    std::vector<Tensor> c = nmap(pairwise, {over}, args);
    for (size_t k = 0; k < m; ++k) {
      bool same = c[k].rank() == x[k].rank();
      for (int i = 0; same && i < x[k].rank(); ++i) {
        const Name a = x[k].axes().name(i);
        same = c[k].has_axis(a) && (a == over || c[k].size(a) == x[k].axes().size(i));
      }
      if (!same)
        throw ShapeError("[associative_scan] combine turned element " + std::to_string(k) + " " +
                         x[k].axes().describe() + " into " + c[k].axes().describe() + "; it must keep the axes");
      x[k] = reverse ? concat({c[k], slice(x[k], over, n - d, n)}, over)
                     : concat({slice(x[k], over, 0, d), c[k]}, over);
    }
  }
  return x;
}

}  // namespace tenax
