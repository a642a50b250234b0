// Building contraction specs for dot and for the VJPs of dot.
#include "tenax/named/contraction.h"

#include "tenax/core/error.h"
#include "tenax/named/align.h"

namespace tenax {

ContractionSpec make_contraction(const Axes& x, const Axes& y, const AxisList& over, const char* op) {
  (void)align_axes(x, y, op);  // checks shared sizes
  ContractionSpec s;
  for (Name n : over) {
    if (!x.contains(n) || !y.contains(n))
      throw AxisError(std::string("[") + op + "] contraction axis '" + n.str() +
                      "' must be in both operands; operand 0 has " + x.describe() + ", operand 1 has " +
                      y.describe());
  }
  for (int i = 0; i < x.rank(); ++i) {
    Axis a = x[i];
    if (over.contains(a.name)) {
      s.summed.push_back(a);
    } else {
      (y.contains(a.name) ? s.batch : s.free_x).push_back(a);
      s.result.push_back(a);
    }
  }
  for (int j = 0; j < y.rank(); ++j) {
    Axis a = y[j];
    if (!x.contains(a.name)) {
      s.free_y.push_back(a);
      s.result.push_back(a);
    }
  }
  return s;
}

ContractionSpec make_contraction_to(const Axes& x, const Axes& y, const Axes& result, const char* op) {
  ContractionSpec s;
  for (int i = 0; i < x.rank(); ++i) {
    Axis a = x[i];
    bool in_y = y.contains(a.name), kept = result.contains(a.name);
    if (!in_y && !kept)
      throw AxisError(std::string("[") + op + "] axis '" + a.name.str() +
                      "' of operand 0 is neither shared nor kept");
    if (in_y && !kept) s.summed.push_back(a);
    else if (in_y) s.batch.push_back(a);
    else s.free_x.push_back(a);
  }
  for (int j = 0; j < y.rank(); ++j) {
    Axis a = y[j];
    if (x.contains(a.name)) continue;
    if (!result.contains(a.name))
      throw AxisError(std::string("[") + op + "] axis '" + a.name.str() +
                      "' of operand 1 is neither shared nor kept");
    s.free_y.push_back(a);
  }
  for (int r = 0; r < result.rank(); ++r)
    if (!x.contains(result.name(r)) && !y.contains(result.name(r)))
      throw AxisError(std::string("[") + op + "] result axis '" + result.name(r).str() +
                      "' is in neither operand");
  s.result = result;
  return s;
}

}  // namespace tenax
