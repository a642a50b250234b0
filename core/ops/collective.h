#pragma once
// Library-internal: the collective ops (sums and maxima over ranks, the varying alias of a
// replicated tensor, gathering a sharded axis) and how every op treats a sharded operand.
#include "tenax/core/ops/op.h"

namespace tenax::detail {

/// Σ over ranks of a per-rank partial (attrs.i[0]: the sharding whose communicator sums). Its
/// reverse rule passes the replicated cotangent to every rank's partial.
extern const OpDef op_all_reduce_sum;
/// The elementwise maximum over ranks (attrs.i[0] as above).
extern const OpDef op_all_reduce_max;
/// A replicated tensor as it enters sharded computation: the value itself, whose adjoint collects
/// this rank's contributions and is summed over ranks once, in the reverse sweep (attrs.i[0] as
/// above). The tape makes one per tracked replicated tensor (autodiff/tape.cpp).
extern const OpDef op_vary;
/// The whole of a sharded axis on every rank (attrs.i[0]: the sharding, attrs.axes: its axis).
extern const OpDef op_all_gather;

/// Whether an op's attributes name `axis` (its axes, second axes or shape).
bool names_axis(const Attrs& a, Name axis);

/// apply() for a call with a sharded input: checks the call against the sharding, runs it,
/// marks the result sharded where it keeps the axis and all-reduces it where the op reduced over
/// the axis (OpDef::shard).
Tensor apply_sharded(const OpDef& op, Inputs inputs, const Attrs& attrs);

}  // namespace tenax::detail
