#pragma once
// Copies that move an axis (contiguous(transpose(x)), a copy into a transposed layout) as blocked
// tiles: each tile is read as rows of whole cache lines, transposed in L1 and written as rows of
// whole cache lines, streamed past the caches when the output is large; and copies of whole rows
// into strided places (concat along an inner axis), streamed likewise.
#include "tenax/backends/kernels.h"

namespace tenax::cpu {

/// Copies args[1] into args[0] over `dims` when, with size-1 dims dropped, the loop is a batch of
/// matrices the copy transposes: the output contiguous along one dim, the input along the other,
/// each at least a cache line wide, and outer dims (if any) laid out plainly. Returns false (and does
/// nothing) otherwise, for the generic loop. T is float or double.
template <class T>
bool transpose_copy(const detail::LoopDims& dims, const detail::LoopArg* args);

/// Copies args[1] into args[0] over `dims` when both are contiguous along the innermost dim (of
/// size > 1) and its rows are at least 256 bytes: each row copied whole, streamed past the caches
/// when the output is large (a concat along an inner axis: every output row gets one row of each
/// input). Returns false (and does nothing) otherwise, or for operands that overlap.
template <class T>
bool rows_copy(const detail::LoopDims& dims, const detail::LoopArg* args);

}  // namespace tenax::cpu
