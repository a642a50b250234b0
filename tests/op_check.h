#pragma once
// Helpers for the generic op tests: scrambled layouts, comparison by axis name, finite differences.
#include <gtest/gtest.h>

#include <complex>
#include <functional>
#include <random>
#include <vector>

#include <tenax/tenax.h>

#include "tenax/core/ops/dispatch.h"

namespace tenax::testing {

/// The same values as `t` in a non-contiguous view (every other element of a larger buffer) with
/// its axes in a random order. Non-float tensors and scalars come back unchanged.
Tensor scramble(const Tensor& t, std::mt19937_64& rng);

/// Max |a - b| / (atol + rtol |b|) over elements matched by axis name; > 1 means a mismatch.
double mismatch(const Tensor& a, const Tensor& b, double rtol, double atol);

/// Writes `v` to the element with flat row-major index `flat` (in t's axis order) of a float tensor.
void set_flat(const Tensor& t, int64_t flat, double v);
/// Reads the element with flat row-major index `flat` (in t's axis order).
double get_flat(const Tensor& t, int64_t flat);
/// The same two for any floating dtype as complex numbers (a real tensor takes the real part).
void set_flat_complex(const Tensor& t, int64_t flat, std::complex<double> v);
std::complex<double> get_flat_complex(const Tensor& t, int64_t flat);
/// (args with flat element i of args[k] raised by h, the same lowered by h): contiguous copies of
/// args[k], the other arguments shared. For central differences.
std::pair<std::vector<Tensor>, std::vector<Tensor>> nudged(const std::vector<Tensor>& args, size_t k, int64_t i,
                                                           double h);

}  // namespace tenax::testing
