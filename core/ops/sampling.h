#pragma once
// Helpers for op samplers: random named axes from a fixed pool (so operands agree on sizes) and
// random values in a range. Used only to generate cases for the generic op tests.
#include <random>

#include "tenax/core/creation.h"
#include "tenax/core/ops/op.h"

namespace tenax::detail {

/// The pool of axis names p, q, r, s (with default sizes 3, 2, 4, 1).
Axis pool_axis(int i);
inline constexpr int kPoolSize = 4;

/// `k` distinct pool axes in random order, each with a random size in 1..4.
Axes random_axes(SampleRng& rng, int k);
/// A random subset of `of` (each kept with probability 1/2), order preserved.
Axes random_subset(SampleRng& rng, const Axes& of);
/// Uniform values in [lo, hi); complex dtypes: real parts so, imaginary parts in
/// [-(hi - lo) / 2, (hi - lo) / 2).
Tensor random_values(SampleRng& rng, const Axes& axes, DType dtype, double lo, double hi);
/// Values with |x| in [lo, hi) and a random sign.
Tensor random_signed(SampleRng& rng, const Axes& axes, DType dtype, double lo, double hi);
/// A random symmetric positive definite matrix over (row, col) with `batch` axes.
Tensor random_spd(SampleRng& rng, Name row, Name col, int64_t n, const Axes& batch, DType dtype);

}  // namespace tenax::detail
