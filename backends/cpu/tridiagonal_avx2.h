#pragma once
// The float64 Thomas solve built for AVX2 + FMA (tridiagonal_avx2.cpp), in builds for x86-64 with
// a compiler that has those flags (TENAX_HAVE_AVX2_KERNELS); call only where the CPU has both.
#include <cstdint>

#include "tenax/backends/kernels.h"

namespace tenax::cpu {

/// thomas_range for float64 with 4-wide vectors: systems [begin, end) of `a`; the first failed
/// system or -1.
int64_t thomas_range_avx2(const detail::TridiagonalArgs& a, int64_t begin, int64_t end);

}  // namespace tenax::cpu
