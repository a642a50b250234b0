// nmap: runs f once with the `over` axes mapped (core applies the batching rule to every op).
#include "tenax/autodiff/nmap.h"

#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {

std::vector<Tensor> nmap(const MultiFunction& f, const AxisList& over, const std::vector<Tensor>& args) {
  if (over.empty()) throw AxisError("[nmap] name at least one axis to map over");
  Axes mapped;
  for (Name n : over) {
    if (detail::g_mapped.contains(n))
      throw AxisError("[nmap] axis '" + n.str() + "' is already mapped by an enclosing nmap/map");
    int64_t size = -1;
    size_t first = 0;
    for (size_t k = 0; k < args.size(); ++k) {
      if (!args[k].defined()) throw Error("[nmap] argument " + std::to_string(k) + " is undefined");
      if (!args[k].has_axis(n)) continue;
      const int64_t s = args[k].size(n);
      if (size < 0) {
        size = s;
        first = k;
      } else if (s != size) {
        throw ShapeError("[nmap] mapped axis '" + n.str() + "' has size " + std::to_string(size) + " in argument " +
                         std::to_string(first) + " " + args[first].axes().describe() + " but size " +
                         std::to_string(s) + " in argument " + std::to_string(k) + " " + args[k].axes().describe());
      }
    }
    if (size < 0) throw AxisError("[nmap] no argument has the mapped axis '" + n.str() + "'");
    mapped.push_back({n, size});
  }
  std::vector<Tensor> outs;
  {
    detail::MappedScope scope(over);
    outs = f(args);
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].defined()) throw Error("[nmap] result " + std::to_string(k) + " of f is undefined");
    Axes missing;
    for (int i = 0; i < mapped.rank(); ++i)
      if (!outs[k].has_axis(mapped.name(i))) missing.push_back(mapped[i]);
    if (missing.rank() > 0) outs[k] = broadcast(outs[k], missing);
  }
  return outs;
}

Tensor nmap(const Function& f, const AxisList& over, const std::vector<Tensor>& args) {
  return nmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{f(a)}; }, over, args).front();
}

}  // namespace tenax
