#pragma once
// The CPU backend's AVX2 + FMA builds: their entry points, in builds for x86-64 with a compiler
// that has those flags (TENAX_HAVE_AVX2_KERNELS), and whether this process uses them. Each build
// is a file compiled with -mavx2 -mfma that exports its entry points only (tests/ checks this):
// tridiagonal_avx2.cpp (the Thomas panels), contract_avx2.cpp (the tiny contractions) and
// complex_avx2.cpp (complex products), unary_avx2.cpp (the unary ops' vector forms).
#include <cstdint>

#include "tenax/backends/kernels.h"

namespace tenax::cpu {

/// Whether the AVX2 builds run: the build has them, the CPU has AVX2 and FMA, and the environment
/// variable TENAX_CPU_AVX2 is not 0 (for comparison, and to test the baseline on AVX2 machines).
/// Decided once per process.
bool cpu_avx2();

/// complex_product_avx2's form: y += instead of y =, and conj(d) instead of d.
inline constexpr int kComplexAccumulate = 1, kComplexConjugate = 2;

#if defined(TENAX_HAVE_AVX2_KERNELS)
/// thomas_range for float64 with 4-wide vectors: systems [begin, end) of `a` (rows-inner panels
/// prefetching the next panel's operands where `fetch`); the first failed system or -1.
int64_t thomas_range_avx2(const detail::TridiagonalArgs& a, int64_t begin, int64_t end, bool fetch);
/// Whether a solve's operands and x all hold their systems back to back (rows contiguous), A x =
/// rhs, no pivoting, no fused reverse rule: the layout chunked_range_avx2(_f32) takes.
bool chunkable_avx2(const detail::TridiagonalArgs& a);
/// Systems [begin, end) of a chunkable float64 call, each of 4 lanes walking a quarter of them
/// (tridiagonal_chunks.h); the first failed system or -1.
int64_t chunked_range_avx2(const detail::TridiagonalArgs& a, int64_t begin, int64_t end);
/// The same for float32, 4 floats per vector.
int64_t chunked_range_avx2_f32(const detail::TridiagonalArgs& a, int64_t begin, int64_t end);
/// The same for float32, 8-wide.
int64_t thomas_range_avx2_f32(const detail::TridiagonalArgs& a, int64_t begin, int64_t end, bool fetch);
/// Systems [begin, end) of `a` that all share the matrix `factor` holds (tridiagonal_shared.h:
/// factor_shared's 3n values, or with a.pivoting the 5n of the LU that tridiagonal.cpp packs),
/// float64 and float32; with the fused reverse rule, the range's sums of the matrix's adjoints
/// added into `sums` (SharedSolve::run), else null.
void shared_range_avx2(const detail::TridiagonalArgs& a, const double* factor, int64_t begin, int64_t end,
                       double* sums);
void shared_range_avx2_f32(const detail::TridiagonalArgs& a, const float* factor, int64_t begin, int64_t end,
                           float* sums);

/// y (+)= g d or g conj(d) over the first elements of n complex numbers that fill whole vectors
/// (complex_avx2.cpp; bitwise the scalar kernels' products), as interleaved parts; g and d are rows
/// (`g_row`, `d_row`) or one number each. Returns how many it did (the caller does the rest).
int64_t complex_product_avx2(int64_t n, double* y, const double* g, bool g_row, const double* d, bool d_row,
                             int form);
int64_t complex_product_avx2_f32(int64_t n, float* y, const float* g, bool g_row, const float* d, bool d_row,
                                 int form);

/// A unary op with a vector form (unary_forms.h) over the first elements of n contiguous ones that
/// fill whole 256-bit vectors, bitwise the baseline's (unary_avx2.cpp); returns how many it did
/// (0 for an op without a vector form).
int64_t unary_avx2(detail::UnaryOp op, int64_t n, float* y, const float* x);
int64_t unary_avx2(detail::UnaryOp op, int64_t n, double* y, const double* x);

/// The AVX2 build's kernel for a tiny contraction plan (contract_fixed.h's fixed_kernel, which may
/// rewrite the plan).
using ContractFn = detail::ReplayFn;
ContractFn fixed_kernel_avx2_f64(detail::ContractPlan& p, int m, int n, int k);
ContractFn fixed_kernel_avx2_f32(detail::ContractPlan& p, int m, int n, int k);
#endif

}  // namespace tenax::cpu
