// Broadcast-by-name alignment: result axes and per-operand strides over them.
#include "tenax/named/align.h"

#include "tenax/core/error.h"

namespace tenax {

Axes align_axes(const Axes& a, const Axes& b, const char* op, int index_a, int index_b) {
  Axes out = a;
  for (int j = 0; j < b.rank(); ++j) {
    int i = a.index_of(b.name(j));
    if (i < 0) {
      out.push_back(b[j]);
    } else if (a.size(i) != b.size(j)) {
      throw ShapeError(std::string("[") + op + "] axis '" + b.name(j).str() + "' has size " +
                       std::to_string(a.size(i)) + " in operand " + std::to_string(index_a) + " " +
                       a.describe() + " but size " + std::to_string(b.size(j)) + " in operand " +
                       std::to_string(index_b) + " " + b.describe());
    }
  }
  return out;
}

void strides_over(const Axes& operand, const int64_t* operand_strides, const Axes& target,
                  int64_t* out_strides) {
  for (int t = 0; t < target.rank(); ++t) {
    int i = operand.index_of(target.name(t));
    out_strides[t] = i < 0 ? 0 : operand_strides[i];
  }
}

}  // namespace tenax
