#pragma once
// associative_scan: all prefix combinations of a sequence under an associative operator, in
// 2 log2(T) vectorised levels and O(T) combinations (a work-efficient parallel prefix),
// differentiable like any ops.
#include <functional>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

/// An associative combination of two elements, each a tuple of tensors: combine(a, b) is "a then
/// b" (a comes earlier in the sequence). It is written for ONE element: like an nmap body, the
/// scanned axis is invisible inside it (it is applied to many pairs at once).
using AssociativeFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& a, const std::vector<Tensor>& b)>;

/// Which way a prefix runs: from the first index (forward) or from the last (reverse).
enum class ScanDirection { forward, reverse };

/// result_t = elems_0 ⊕ elems_1 ⊕ ... ⊕ elems_t along `over` (ScanDirection::reverse: elems_t ⊕ ...
/// ⊕ elems_{T-1}). Every tensor of `elems` has the axis `over` with the same size; results have the
/// axes of `elems`. Work-efficient: adjacent pairs are combined, their prefixes computed
/// recursively, and the other positions filled from them, so that T - 1 ... 2T combinations run in
/// 2 ceil(log2 T) levels, each ONE vectorised call of `combine` over all its pairs (large levels run
/// on oneTBB through the kernels), joined with `interleave`; no per-element loop. The operator must
/// be associative; it need not be commutative.
/// Throws AxisError / ShapeError when an element lacks `over` or sizes disagree, and ShapeError
/// when `combine` changes the axes of an element.
std::vector<Tensor> associative_scan(const AssociativeFn& combine, const std::vector<Tensor>& elems, Name over,
                                     ScanDirection direction = ScanDirection::forward);

}  // namespace tenax
