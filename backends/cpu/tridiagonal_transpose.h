#pragma once
// The register transposes of the rows-inner Thomas panels (tridiagonal_thomas.h): a block of VS
// rows of VS systems, loaded as one vector per system, becomes one vector per row; and the copy of
// a row-interleaved panel out to the systems' contiguous rows built on them. Like that
// header, included only by it and in an anonymous namespace: one copy per instruction set (the
// AVX forms exist only in the AVX2 build).
#include <cstddef>
#include <cstdint>

#include <xsimd/xsimd.hpp>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set

// m[k] = VS consecutive values of lane k  ->  m[j] = value j of every lane. VS x VS for 2 doubles
// or 4 floats (SSE2), 4 doubles or 8 floats (AVX).
template <class T, class V, std::size_t VS>
inline void transpose_block(V (&m)[VS]) {
  if constexpr (VS == 2) {
    const V a = xsimd::zip_lo(m[0], m[1]), b = xsimd::zip_hi(m[0], m[1]);
    m[0] = a;
    m[1] = b;
  } else if constexpr (VS == 4 && sizeof(T) == 8) {
#if defined(__AVX__)
    const __m256d t0 = _mm256_unpacklo_pd(m[0], m[1]), t1 = _mm256_unpackhi_pd(m[0], m[1]);
    const __m256d t2 = _mm256_unpacklo_pd(m[2], m[3]), t3 = _mm256_unpackhi_pd(m[2], m[3]);
    m[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    m[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    m[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    m[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
#endif
  } else if constexpr (VS == 8 && sizeof(T) == 4) {
#if defined(__AVX__)
    // 8 x 8 floats: pairs interleaved, then quadruples, then 128-bit halves swapped.
    const __m256 t0 = _mm256_unpacklo_ps(m[0], m[1]), t1 = _mm256_unpackhi_ps(m[0], m[1]);
    const __m256 t2 = _mm256_unpacklo_ps(m[2], m[3]), t3 = _mm256_unpackhi_ps(m[2], m[3]);
    const __m256 t4 = _mm256_unpacklo_ps(m[4], m[5]), t5 = _mm256_unpackhi_ps(m[4], m[5]);
    const __m256 t6 = _mm256_unpacklo_ps(m[6], m[7]), t7 = _mm256_unpackhi_ps(m[6], m[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    m[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    m[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    m[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    m[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    m[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    m[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    m[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    m[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
#endif
  } else if constexpr (VS == 4) {
    using W = xsimd::batch<double, typename V::arch_type>;  // pairs of floats moved as one 64-bit value
    const W t0 = xsimd::bitwise_cast<W>(xsimd::zip_lo(m[0], m[1]));
    const W t1 = xsimd::bitwise_cast<W>(xsimd::zip_hi(m[0], m[1]));
    const W t2 = xsimd::bitwise_cast<W>(xsimd::zip_lo(m[2], m[3]));
    const W t3 = xsimd::bitwise_cast<W>(xsimd::zip_hi(m[2], m[3]));
    m[0] = xsimd::bitwise_cast<V>(xsimd::zip_lo(t0, t2));
    m[1] = xsimd::bitwise_cast<V>(xsimd::zip_hi(t0, t2));
    m[2] = xsimd::bitwise_cast<V>(xsimd::zip_lo(t1, t3));
    m[3] = xsimd::bitwise_cast<V>(xsimd::zip_hi(t1, t3));
  }
}

// One group of a row-interleaved panel (row i, lane k at src[i * P + k]) out to one contiguous
// row per lane: row i of lane k (< real) to row(k)[i]. With kBlocks, blocks of VS rows go through
// transpose_block, each lane's vector stored by put(address, vector); the rows past the last whole
// block (all of them without kBlocks) one by one, by put_one(element, value).
template <class T, class V, bool kBlocks, class Row, class Put, class PutOne>
inline void interleaved_to_rows(const T* src, int64_t P, int64_t n, int real, Row row, Put put,
                                PutOne put_one) {
  constexpr int VS = static_cast<int>(V::size);
  int64_t i0 = 0;
  if constexpr (kBlocks) {
    for (; i0 + VS <= n; i0 += VS) {
      V m[VS];
      for (int j = 0; j < VS; ++j) m[j] = V::load_aligned(src + (i0 + j) * P);
      transpose_block<T>(m);
      for (int k = 0; k < real; ++k) put(row(k) + i0, m[k]);
    }
  }
  for (; i0 < n; ++i0)
    for (int k = 0; k < real; ++k) put_one(row(k)[i0], src[i0 * P + k]);
}
// The same, the rows past the last whole block assigned.
template <class T, class V, bool kBlocks, class Row, class Put>
inline void interleaved_to_rows(const T* src, int64_t P, int64_t n, int real, Row row, Put put) {
  interleaved_to_rows<T, V, kBlocks>(src, P, n, real, row, put, [](T& e, T v) { e = v; });
}

}  // namespace
}  // namespace tenax::cpu
