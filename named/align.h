#pragma once
// Broadcast by name: the result axes of an elementwise op and where each operand's axes land.
#include "tenax/named/axes.h"

namespace tenax {

/// Result axes of aligning `a` and `b` by name: a's order, then b's new axes in b's order.
/// Throws ShapeError naming `op`, the axis and both operands' axes when sizes differ.
Axes align_axes(const Axes& a, const Axes& b, const char* op, int index_a = 0, int index_b = 1);

/// Strides of `operand` laid over `target` axes: an operand's stride where it has the axis, 0 where
/// it does not (broadcast). Every operand axis must appear in `target` (the caller guarantees it).
void strides_over(const Axes& operand, const int64_t* operand_strides, const Axes& target,
                  int64_t* out_strides);

}  // namespace tenax
