#pragma once
// Parameter constraints: the map from unconstrained coordinates (what an optimiser moves) to the
// constrained value the graph sees, differentiable through the tape, and its inverse.
#include <string>

#include "tenax/core/tensor.h"

namespace tenax::model_detail {

enum class ConstraintKind {
  none,      ///< value = u
  softplus,  ///< positive: value = softplus(u)
  exp,       ///< positive: value = exp(u)
  interval,  ///< value = lower + (upper - lower) * sigmoid(u)
  spd,       ///< symmetric positive definite over (row, col): value = L Lᵀ, L = strict_lower(u) + diag(exp(u))
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::none;
  double lower = 0.0;
  double upper = 0.0;
  Name row;
  Name col;
};

/// value = f(u), with tenax ops (u may be tracked).
Tensor constrain(const Constraint& c, const Tensor& u);
/// u = f⁻¹(value); throws ModelError at `pointer` when the value violates the constraint.
Tensor unconstrain(const Constraint& c, const Tensor& value, const std::string& pointer);
/// "positive (softplus)", "interval [0, 1]", ...
std::string describe(const Constraint& c);
/// Throws NumericError (naming `pointer` and the coordinate) when an unconstrained coordinate maps
/// outside the constraint in `dtype`'s arithmetic: softplus or exp underflowing to 0 (u below about
/// -745 in float64, -103 in float32) or exp overflowing, an interval's sigmoid rounding onto an end.
void check_representable(const Constraint& c, const std::vector<double>& u, DType dtype, const std::string& pointer);

}  // namespace tenax::model_detail
