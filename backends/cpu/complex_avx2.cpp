// Complex products over rows with 256-bit vectors (avx2.h): y (+)= g d or g conj(d), g and d each
// a row or one number. Each part is the textbook product's (products, then one add or subtract:
// addsub, no fused multiply-add), so the results are bitwise those of the scalar kernels
// (product.h). Compiled with -mavx2 and contraction off; only the entry points are external.
#include <immintrin.h>

#include "tenax/backends/cpu/avx2.h"

namespace tenax::cpu {
namespace {

// Two complex128 per vector: [re0 im0 re1 im1].
template <bool kAcc, bool kConj, bool kGRow, bool kDRow>
int64_t rows_f64(int64_t n, double* y, const double* g, const double* d) {
  const __m256d g1 = _mm256_broadcast_pd(reinterpret_cast<const __m128d*>(g));
  const __m256d d1 = _mm256_broadcast_pd(reinterpret_cast<const __m128d*>(d));
  const __m256d sign = _mm256_set1_pd(-0.0);
  const int64_t m = n & ~int64_t{1};
  for (int64_t i = 0; i < m; i += 2) {
    const __m256d gv = kGRow ? _mm256_loadu_pd(g + 2 * i) : g1;
    const __m256d dv = kDRow ? _mm256_loadu_pd(d + 2 * i) : d1;
    const __m256d dr = _mm256_movedup_pd(dv);
    __m256d di = _mm256_permute_pd(dv, 0xF);
    if constexpr (kConj) di = _mm256_xor_pd(di, sign);
    const __m256d gs = _mm256_permute_pd(gv, 0x5);  // [im0 re0 im1 re1]
    __m256d r = _mm256_addsub_pd(_mm256_mul_pd(gv, dr), _mm256_mul_pd(gs, di));
    if constexpr (kAcc) r = _mm256_add_pd(_mm256_loadu_pd(y + 2 * i), r);
    _mm256_storeu_pd(y + 2 * i, r);
  }
  return m;
}

// Four complex64 per vector.
template <bool kAcc, bool kConj, bool kGRow, bool kDRow>
int64_t rows_f32(int64_t n, float* y, const float* g, const float* d) {
  const __m256 g1 = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(g)));
  const __m256 d1 = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(d)));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const int64_t m = n & ~int64_t{3};
  for (int64_t i = 0; i < m; i += 4) {
    const __m256 gv = kGRow ? _mm256_loadu_ps(g + 2 * i) : g1;
    const __m256 dv = kDRow ? _mm256_loadu_ps(d + 2 * i) : d1;
    const __m256 dr = _mm256_moveldup_ps(dv);
    __m256 di = _mm256_movehdup_ps(dv);
    if constexpr (kConj) di = _mm256_xor_ps(di, sign);
    const __m256 gs = _mm256_permute_ps(gv, 0xB1);
    __m256 r = _mm256_addsub_ps(_mm256_mul_ps(gv, dr), _mm256_mul_ps(gs, di));
    if constexpr (kAcc) r = _mm256_add_ps(_mm256_loadu_ps(y + 2 * i), r);
    _mm256_storeu_ps(y + 2 * i, r);
  }
  return m;
}

template <class R, template <bool, bool, bool, bool> class Rows>
int64_t dispatch(int64_t n, R* y, const R* g, bool g_row, const R* d, bool d_row, int form) {
  using Fn = int64_t (*)(int64_t, R*, const R*, const R*);
  static constexpr Fn table[16] = {
      Rows<false, false, false, false>::f, Rows<false, false, false, true>::f, Rows<false, false, true, false>::f,
      Rows<false, false, true, true>::f,   Rows<false, true, false, false>::f, Rows<false, true, false, true>::f,
      Rows<false, true, true, false>::f,   Rows<false, true, true, true>::f,   Rows<true, false, false, false>::f,
      Rows<true, false, false, true>::f,   Rows<true, false, true, false>::f,  Rows<true, false, true, true>::f,
      Rows<true, true, false, false>::f,   Rows<true, true, false, true>::f,   Rows<true, true, true, false>::f,
      Rows<true, true, true, true>::f};
  const int acc = (form & kComplexAccumulate) ? 1 : 0, conj = (form & kComplexConjugate) ? 1 : 0;
  return table[acc * 8 + conj * 4 + (g_row ? 2 : 0) + (d_row ? 1 : 0)](n, y, g, d);
}
template <bool kAcc, bool kConj, bool kGRow, bool kDRow>
struct RowsF64 {
  static int64_t f(int64_t n, double* y, const double* g, const double* d) {
    return rows_f64<kAcc, kConj, kGRow, kDRow>(n, y, g, d);
  }
};
template <bool kAcc, bool kConj, bool kGRow, bool kDRow>
struct RowsF32 {
  static int64_t f(int64_t n, float* y, const float* g, const float* d) {
    return rows_f32<kAcc, kConj, kGRow, kDRow>(n, y, g, d);
  }
};

}  // namespace

int64_t complex_product_avx2(int64_t n, double* y, const double* g, bool g_row, const double* d, bool d_row,
                             int form) {
  return dispatch<double, RowsF64>(n, y, g, g_row, d, d_row, form);
}
int64_t complex_product_avx2_f32(int64_t n, float* y, const float* g, bool g_row, const float* d, bool d_row,
                                 int form) {
  return dispatch<float, RowsF32>(n, y, g, g_row, d, d_row, form);
}

}  // namespace tenax::cpu
