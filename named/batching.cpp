// The batching rule shared by every op (see batching.h).
#include "tenax/named/batching.h"

#include "tenax/core/error.h"

namespace tenax {

AxisList visible_axes(const Axes& axes, const AxisList& mapped) {
  AxisList out;
  for (int i = 0; i < axes.rank(); ++i)
    if (!mapped.contains(axes.name(i))) out.push_back(axes.name(i));
  return out;
}

Axes split_mapped(const Axes& axes, const AxisList& mapped, bool want_mapped) {
  Axes out;
  for (int i = 0; i < axes.rank(); ++i)
    if (mapped.contains(axes.name(i)) == want_mapped) out.push_back(axes[i]);
  return out;
}

void check_unmapped(const AxisList& named, const AxisList& mapped, const char* op) {
  for (Name n : named)
    if (mapped.contains(n))
      throw AxisError(std::string("[") + op + "] axis '" + n.str() +
                      "' is mapped by an enclosing nmap/map and invisible inside it; mapped axes " +
                      mapped.describe());
}

AxisList complete_order(const Axes& axes, const AxisList& order, const AxisList& mapped, const char* op) {
  AxisList out = order;
  for (int i = 0; i < axes.rank(); ++i) {
    Name n = axes.name(i);
    if (order.contains(n)) continue;
    if (!mapped.contains(n))
      throw AxisError(std::string("[") + op + "] order " + order.describe() + " must name every axis of " +
                      axes.describe());
    out.push_back(n);
  }
  return out;
}

}  // namespace tenax
