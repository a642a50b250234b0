#pragma once
// Library-internal: an elementwise op's reverse rule in the form the tape runs it by value. A small
// contiguous host call (at most kLaneElements elements, float64 or float32, every operand laid out
// as the output or a single untracked element) is recorded with its residuals' values copied, and
// its reverse rule runs as flat derivative kernels on pointers into the tape's arenas: no tensor
// handles, no VjpContext (autodiff/tape_lane.cpp).
#include <cstdint>

#include "tenax/backends/kernels.h"

namespace tenax {

/// The largest call, in elements, that a tape records by value.
inline constexpr int64_t kLaneElements = 64;

/// An op's flat derivative kernels: [dt][side][assign] — dt 0 float64, 1 float32, 2 complex128,
/// 3 complex64 (records by value take the first two; the eager VJP's flat path all four); the kernel
/// for input `side` writes its adjoint (assign) or adds to it. Their operands: the adjoint, the
/// cotangent, the op's inputs, its output (each a residual's values where the op saves it, else
/// absent).
struct LaneKernels {
  detail::FlatFn f[detail::kNumeric][2][2] = {};
};

struct LaneRule {
  /// The op's kernels (looked up once, on first use).
  const LaneKernels& (*kernels)() = nullptr;
  /// Bit i: the output's derivative by input i is 1, so the cotangent itself is lent to that
  /// input as its adjoint.
  uint8_t identity = 0;
};

}  // namespace tenax
