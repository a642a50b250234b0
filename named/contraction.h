#pragma once
// Contraction specs: which axes of two operands are summed, kept as batch, or kept as free.
#include "tenax/named/axes.h"

namespace tenax {

/// Classification of the axes of a named contraction z = Σ_over x * y.
/// Every axis of x and y is exactly one of: summed (in both, named in `over`), batch (in both, kept),
/// free of x (only in x, kept), free of y (only in y, kept). Result axes: x's kept axes in x's order,
/// then y's free axes in y's order.
struct ContractionSpec {
  Axes result;
  Axes summed;   ///< in x's order
  Axes batch;    ///< in x's order
  Axes free_x;   ///< in x's order
  Axes free_y;   ///< in y's order
};

/// Builds the spec of dot(x, y, over); throws AxisError/ShapeError naming `op` when an axis in
/// `over` is missing from either operand or when shared axes differ in size.
ContractionSpec make_contraction(const Axes& x, const Axes& y, const AxisList& over, const char* op);

/// Spec of the contraction of x and y whose result has exactly the axes `result` (in that order):
/// shared axes not in `result` are summed. Used by VJPs; throws when an axis of `result` is in
/// neither operand or an unshared axis would be dropped.
ContractionSpec make_contraction_to(const Axes& x, const Axes& y, const Axes& result, const char* op);

}  // namespace tenax
