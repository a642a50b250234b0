// The Thomas panels (tridiagonal_thomas.h, tridiagonal_range.h) built for AVX2 + FMA: 4 doubles (8 floats)
// per vector, so the rows-inner path transposes 4 x 4 (8 x 8) blocks and runs 4 (8) systems per instruction.
// Compiled with -mavx2 -mfma (backends/CMakeLists.txt) and called only where the CPU has both
// (tridiagonal.cpp checks at run time).
#include "tenax/backends/cpu/avx2.h"

#include "tenax/backends/cpu/tridiagonal_chunks.h"
#include "tenax/backends/cpu/tridiagonal_range.h"
#include "tenax/backends/cpu/tridiagonal_shared.h"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "tridiagonal_avx2.cpp must be compiled with -mavx2 -mfma"
#endif

namespace tenax::cpu {

int64_t thomas_range_avx2(const detail::TridiagonalArgs& a, int64_t begin, int64_t end, bool fetch) {
  return thomas_range<double>(a, begin, end, fetch);
}

bool chunkable_avx2(const detail::TridiagonalArgs& a) { return chunkable(a); }

int64_t chunked_range_avx2(const detail::TridiagonalArgs& a, int64_t begin, int64_t end) {
  return chunked_range<double>(a, begin, end);
}

int64_t chunked_range_avx2_f32(const detail::TridiagonalArgs& a, int64_t begin, int64_t end) {
  return chunked_range<float>(a, begin, end);
}

int64_t thomas_range_avx2_f32(const detail::TridiagonalArgs& a, int64_t begin, int64_t end, bool fetch) {
  return thomas_range<float>(a, begin, end, fetch);
}

void shared_range_avx2(const detail::TridiagonalArgs& a, const double* factor, int64_t begin, int64_t end,
                       double* sums) {
  shared_range<double>(a, factor, begin, end, sums);
}

void shared_range_avx2_f32(const detail::TridiagonalArgs& a, const float* factor, int64_t begin, int64_t end,
                           float* sums) {
  shared_range<float>(a, factor, begin, end, sums);
}

}  // namespace tenax::cpu
