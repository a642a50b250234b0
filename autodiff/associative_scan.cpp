// associative_scan in O(n) combines: adjacent pairs combined, their scan computed recursively, the
// remaining positions filled from it — 2 log2(n) levels, each one vectorised call of `combine`.
#include "tenax/autodiff/associative_scan.h"

#include <functional>
#include <optional>

#include "tenax/autodiff/nmap.h"
#include "tenax/core/distributed.h"
#include "tenax/core/ops.h"

namespace tenax {
namespace {

using Elements = std::vector<Tensor>;
using Pairs = std::function<Elements(const Elements& earlier, const Elements& later)>;

// Every tensor of x sliced along `over`: [start, stop) in steps of `step`.
Elements part(const Elements& x, Name over, int64_t start, int64_t stop, int64_t step = 1) {
  Elements r;
  for (const Tensor& t : x) r.push_back(slice(t, over, start, stop, step));
  return r;
}
Elements joined(const Elements& a, const Elements& b, Name over) {
  Elements r;
  for (size_t k = 0; k < a.size(); ++k) r.push_back(concat({a[k], b[k]}, over));
  return r;
}
Elements interleaved(const Elements& even, const Elements& odd, Name over) {
  Elements r;
  for (size_t k = 0; k < even.size(); ++k) r.push_back(interleave(even[k], odd[k], over));
  return r;
}

void check_kept(const Tensor& c, const Tensor& x, Name over, size_t k) {
  bool same = c.rank() == x.rank();
  for (int i = 0; same && i < x.rank(); ++i) {
    const Name a = x.axes().name(i);
    same = c.has_axis(a) && (a == over || c.size(a) == x.axes().size(i));
  }
  if (!same)
    throw ShapeError("[associative_scan] combine turned element " + std::to_string(k) + " " + x.axes().describe() +
                     " into " + c.axes().describe() + "; it must keep the axes");
}

// Prefixes x_0 ⊕ ... ⊕ x_t in O(n) combines: the pairs x_{2i} ⊕ x_{2i+1} scanned recursively give
// the odd positions; each even position 2i >= 2 is the odd prefix before it ⊕ x_{2i}.
Elements prefixes(const Pairs& pairs, const Elements& x, Name over, int64_t n) {
  if (n < 2) return x;
  const int64_t h = n / 2, evens = (n + 1) / 2;
  const Elements odd = prefixes(pairs, pairs(part(x, over, 0, 2 * h, 2), part(x, over, 1, 2 * h, 2)), over, h);
  Elements even = part(x, over, 0, 1);
  if (evens > 1) even = joined(even, pairs(part(odd, over, 0, evens - 1), part(x, over, 2, n, 2)), over);
  return interleaved(even, odd, over);
}

// Suffixes x_t ⊕ ... ⊕ x_{n-1}, the mirror image: pairs counted from the end (x_0 left alone when
// n is odd), their suffixes at the pairs' first positions, the others from the suffix after them.
Elements suffixes(const Pairs& pairs, const Elements& x, Name over, int64_t n) {
  if (n < 2) return x;
  const int64_t h = n / 2, s = n % 2;
  const Elements first = suffixes(pairs, pairs(part(x, over, s, n, 2), part(x, over, s + 1, n, 2)), over, h);
  Elements second = part(x, over, n - 1, n);  // the last position: x_{n-1} alone
  if (h > 1) second = joined(pairs(part(x, over, s + 1, n - 1, 2), part(first, over, 1, h)), second, over);
  if (s == 0) return interleaved(first, second, over);
  return interleaved(joined(pairs(part(x, over, 0, 1), part(first, over, 0, 1)), second, over), first, over);
}

}  // namespace

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
  // combine(earlier, later) on every pair of slices at once (the scanned axis mapped).
  auto pairs = [&](const std::vector<Tensor>& earlier, const std::vector<Tensor>& later) {
    MultiFunction pairwise = [&](const std::vector<Tensor>& ab) {
      std::vector<Tensor> c = combine(std::vector<Tensor>(ab.begin(), ab.begin() + std::ptrdiff_t(m)),
                                      std::vector<Tensor>(ab.begin() + std::ptrdiff_t(m), ab.end()));
      if (c.size() != m)
        throw ShapeError("[associative_scan] combine returned " + std::to_string(c.size()) + " tensors for elements of " +
                         std::to_string(m));
      return c;
    };
    std::vector<Tensor> args = earlier;
    args.insert(args.end(), later.begin(), later.end());
    std::vector<Tensor> c = nmap(pairwise, {over}, args);
    for (size_t k = 0; k < m; ++k) check_kept(c[k], earlier[k], over, k);
    return c;
  };
  return reverse ? suffixes(pairs, elems, over, n) : prefixes(pairs, elems, over, n);
}

}  // namespace tenax
