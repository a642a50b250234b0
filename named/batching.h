#pragma once
// Batching rules. With named axes every op has the same rule for axes mapped by an enclosing
// nmap/map: a mapped axis passes through as a batch axis (elementwise ops align it by name,
// contractions and linear algebra batch over it, reductions over "all axes" leave it out), and an
// op whose attributes name a mapped axis is an error. These functions state that rule; core applies
// it to every op call in one place (core/ops/dispatch.cpp).
#include "tenax/named/axes.h"

namespace tenax {

/// The axes of `axes` that are not mapped, in order ("all axes" inside a mapped function).
AxisList visible_axes(const Axes& axes, const AxisList& mapped);

/// The axes of `axes` that are mapped (`mapped == true`) or not, with their sizes, in order: what
/// a transform inside nmap keeps per slice, and what it differentiates.
Axes split_mapped(const Axes& axes, const AxisList& mapped, bool want_mapped);

/// Throws AxisError naming `op` when `named` (axes an op's attributes name) includes a mapped axis.
void check_unmapped(const AxisList& named, const AxisList& mapped, const char* op);

/// `order` followed by the mapped axes of `axes` that it leaves out, in their current order; throws
/// AxisError when `order` leaves out an axis that is not mapped.
AxisList complete_order(const Axes& axes, const AxisList& order, const AxisList& mapped, const char* op);

}  // namespace tenax
