#pragma once
// How the Thomas panels (tridiagonal_thomas.h) touch memory beyond their registers: stores past
// the caches for what nothing reads back soon, writing or adding into adjoints, and the panels'
// scratch vector. Included only by
// tridiagonal_thomas.h and, like it, in an anonymous namespace: each file that includes it (one
// per instruction set) gets its own copy, so no symbol built with AVX2 is shared with baseline
// code (see tridiagonal_thomas.h).
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set, see above

// Whether vectors of V can be stored past the caches (stream_aligned): 16-byte SSE2 vectors, and
// 32-byte ones in the AVX2 build (without them its rows-inner x stores cost a third of the solve:
// each line was first read for ownership).
template <class V>
constexpr bool kStreamableVector =
#if defined(__AVX__)
    sizeof(V) == 16 || sizeof(V) == 32;
#elif defined(__SSE2__)
    sizeof(V) == 16;
#else
    false;
#endif

// Stores a vector that nothing reads back soon (x, fresh adjoints) at an address aligned to the
// vector's size past the caches (a non-temporal store does not first read the line it writes);
// the caller issues _mm_sfence before its results are handed to another thread. Only for
// kStreamableVector.
template <class T, class V>
inline void stream_aligned(T* p, const V& x) {
#if defined(__AVX__)
  if constexpr (sizeof(V) == 32) {
    if constexpr (std::is_same_v<T, double>)
      _mm256_stream_pd(p, x);
    else
      _mm256_stream_ps(p, x);
    return;
  }
#endif
#if defined(__SSE2__)
  if constexpr (sizeof(V) == 16) {
    if constexpr (std::is_same_v<T, double>)
      _mm_stream_pd(p, x);
    else
      _mm_stream_ps(p, x);
    return;
  }
#endif
  x.store_aligned(p);
}

// dst[w] = v(w) for w < count, streamed where aligned (see stream_aligned).
template <class T, class F>
inline void stream_values(T* dst, int64_t count, F v) {
  int64_t w = 0;
#if defined(__SSE2__)
  for (; w < count && (reinterpret_cast<uintptr_t>(dst + w) & 15); ++w) dst[w] = v(w);
  if constexpr (std::is_same_v<T, double>)
    for (; w + 2 <= count; w += 2) _mm_stream_pd(dst + w, _mm_set_pd(v(w + 1), v(w)));
  else
    for (; w + 4 <= count; w += 4) _mm_stream_ps(dst + w, _mm_set_ps(v(w + 3), v(w + 2), v(w + 1), v(w)));
#endif
  for (; w < count; ++w) dst[w] = v(w);
}

// dst[i] = src[i] for i < n, streamed past the caches where dst is aligned to a vector of V.
template <class V, class T>
inline void stream_copy(T* dst, const T* src, int64_t n) {
  constexpr int64_t VS = V::size;
  int64_t i = 0;
  if constexpr (kStreamableVector<V>) {
    for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % sizeof(V) != 0; ++i) dst[i] = src[i];
    for (; i + VS <= n; i += VS) stream_aligned(dst + i, V::load_unaligned(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
}

// dst[w * stride] = v(w) (an uninitialised fresh adjoint: `assign`) or += v(w), for w < count.
template <class T, class F>
inline void write_or_add(T* dst, int64_t count, int64_t stride, bool assign, F v) {
  if (assign && stride == 1)
    stream_values(dst, count, v);
  else if (assign)
    for (int64_t w = 0; w < count; ++w) dst[w * stride] = v(w);
  else
    for (int64_t w = 0; w < count; ++w) dst[w * stride] += v(w);
}
template <class T, class F>
inline void write_or_add(T* dst, int64_t count, bool assign, F v) {  // unit stride (vectorised)
  if (assign)
    stream_values(dst, count, v);
  else
    for (int64_t w = 0; w < count; ++w) dst[w] += v(w);
}

inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// The panels' scratch: a vector whose allocator type is this file's own (anonymous namespace), so
// that the vector's member functions are instantiated per including file too (see the top).
template <class T>
struct LocalAllocator : std::allocator<T> {
  using value_type = T;
  LocalAllocator() = default;
  template <class U>
  explicit LocalAllocator(const LocalAllocator<U>& /*unused*/) noexcept {}
};
template <class T>
using Scratch = std::vector<T, LocalAllocator<T>>;

}  // namespace
}  // namespace tenax::cpu
