#pragma once
// An independent forward reference for every registered op: plain loops over named indices in
// float64, written from each op's documented meaning (core/ops.h, docs/ops.md), sharing no code
// with the kernels, the dispatch or the broadcasting machinery. The generic op test compares every
// op's output with it.
#include <complex>
#include <string>
#include <vector>

#include <tenax/tenax.h>

#include "tenax/core/ops/op.h"

namespace tenax::testing {

/// What `op` should give on `s` at every element of `actual` (the op's output: its axes and order
/// name the elements), row-major in actual's axis order. Throws std::logic_error naming an op that
/// has no reference here.
std::vector<double> reference_values(const OpDef& op, const OpSample& s, const Tensor& actual);

/// The same for a sample with complex operands (ops with OpDef::complex), from std::complex for
/// the elementwise ops and the recurrence, from the real references of the parts for the
/// real-linear ops (layout, joins, sums, astype) and dot.
std::vector<std::complex<double>> reference_complex_values(const OpDef& op, const OpSample& s, const Tensor& actual);

}  // namespace tenax::testing
