// Copies that move an axis as blocked tiles, and copies of whole rows into strided places
// (transpose_copy.h).
//
// A tile of 32 x 32 elements is read as 32 input rows of 32 elements (whole cache lines), moved
// into an L1 buffer transposed, and written as 32 output rows of 32 elements (whole lines). The
// tiles of one block of input rows run along those rows, so each input row is read in order.
// Large outputs are written with streaming stores: a transposing copy has no use for the lines
// of its output in the cache, and a plain store first reads each output line (a third stream).
// A copy of rows that are not back to back (a concat along an inner axis, a slice's rows) copies
// each row whole, streamed the same way.
#include "tenax/backends/cpu/transpose_copy.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tenax/backends/cpu/loop.h"

namespace tenax::cpu {
namespace {

constexpr int64_t kBlock = 32;
/// Outputs of at least this many bytes are streamed past the caches.
constexpr int64_t kStreamBytes = int64_t{16} << 20;
/// Rows of at least this many bytes are copied whole (rows_copy); shorter ones by the generic loop.
constexpr int64_t kRowBytes = 256;

struct Layout {
  int64_t ni = 0, nj = 0;        // output rows (input-contiguous dim) and columns (output-contiguous)
  int64_t out_row = 0;           // output stride along i
  int64_t in_col = 0;            // input stride along j
  int batch_rank = 0;            // other dims, outermost first
  int64_t batch_sizes[detail::kMaxLoopRank] = {};
  int64_t batch_out[detail::kMaxLoopRank] = {}, batch_in[detail::kMaxLoopRank] = {};
  int64_t batch_count = 1;
};

// Every dim of size > 1 but `skip0` and `skip1` as l's batch; false where an operand broadcasts
// along one (not a plain copy).
bool batch_dims(const detail::LoopDims& dims, const detail::LoopArg* args, int skip0, int skip1, Layout& l) {
  for (int d = 0; d < dims.rank; ++d) {
    if (d == skip0 || d == skip1 || dims.sizes[d] == 1) continue;
    if (args[0].strides[d] <= 0 || args[1].strides[d] <= 0) return false;
    l.batch_sizes[l.batch_rank] = dims.sizes[d];
    l.batch_out[l.batch_rank] = args[0].strides[d];
    l.batch_in[l.batch_rank] = args[1].strides[d];
    l.batch_count *= dims.sizes[d];
    ++l.batch_rank;
  }
  return true;
}

// The copy as a batch of transposes, or false. Each of the two dims spans at least a cache line
// (`item`: bytes per element); the tiles are up to kBlock wide, narrower at the edges.
bool layout_of(const detail::LoopDims& dims, const detail::LoopArg* args, int64_t item, Layout& l) {
  int o = -1, q = -1;
  for (int d = 0; d < dims.rank; ++d) {
    if (dims.sizes[d] == 1) continue;
    if (args[0].strides[d] == 1 && o < 0) o = d;
    else if (args[1].strides[d] == 1 && q < 0) q = d;
  }
  if (o < 0 || q < 0 || args[1].strides[o] <= 0 || args[0].strides[q] <= 0) return false;
  l.nj = dims.sizes[o];
  l.ni = dims.sizes[q];
  l.out_row = args[0].strides[q];
  l.in_col = args[1].strides[o];
  if (l.ni * item < 64 || l.nj * item < 64) return false;
  return batch_dims(dims, args, o, q, l);
}

// The byte ranges the two operands span intersect (an in-place copy is left to the generic loop).
template <class T>
bool overlap(const detail::LoopDims& dims, const detail::LoopArg* args) {
  const char* lo[2];
  const char* hi[2];
  for (int a = 0; a < 2; ++a) {
    int64_t last = 0;
    for (int d = 0; d < dims.rank; ++d) last += (dims.sizes[d] - 1) * args[a].strides[d];
    lo[a] = static_cast<const char*>(args[a].data);
    hi[a] = lo[a] + (last + 1) * int64_t(sizeof(T));
  }
  return lo[0] < hi[1] && lo[1] < hi[0];
}

// Writes `n` elements from `src` to `dst`, streamed where `stream` and both ends are 16-byte aligned.
template <class T>
void put_row(T* dst, const T* src, int64_t n, bool stream) {
#if defined(__SSE2__)
  const auto bytes = size_t(n) * sizeof(T);
  if (stream && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && bytes % 16 == 0) {
    auto* d = reinterpret_cast<__m128i*>(dst);
    const auto* s = reinterpret_cast<const __m128i*>(src);
    for (size_t k = 0; k < bytes / 16; ++k) _mm_stream_si128(d + k, _mm_loadu_si128(s + k));
    return;
  }
#else
  (void)stream;
#endif
  std::memcpy(dst, src, size_t(n) * sizeof(T));
}

// Input rows [j0, j1) of one matrix: every tile along them.
template <class T>
void rows(const Layout& l, T* out, const T* in, int64_t j0, int64_t j1, bool stream) {
  alignas(64) T buf[kBlock][kBlock];
  const int64_t bj = j1 - j0;
  for (int64_t i0 = 0; i0 < l.ni; i0 += kBlock) {
    const int64_t bi = std::min(kBlock, l.ni - i0);
    for (int64_t jj = 0; jj < bj; ++jj) {
      const T* src = in + (j0 + jj) * l.in_col + i0;
      if (i0 + 2 * kBlock <= l.ni)  // the next tile's part of this row, ahead of its turn
        for (int64_t k = 0; k < kBlock; k += int64_t(64 / sizeof(T))) __builtin_prefetch(src + kBlock + k);
      for (int64_t ii = 0; ii < bi; ++ii) buf[ii][jj] = src[ii];
    }
    for (int64_t ii = 0; ii < bi; ++ii) put_row(out + (i0 + ii) * l.out_row + j0, buf[ii], bj, stream);
  }
}

// The matrix `b` of the batch: its offsets into both operands.
void batch_offsets(const Layout& l, int64_t b, int64_t& out_off, int64_t& in_off) {
  out_off = in_off = 0;
  for (int d = l.batch_rank - 1; d >= 0; --d) {
    const int64_t k = b % l.batch_sizes[d];
    b /= l.batch_sizes[d];
    out_off += k * l.batch_out[d];
    in_off += k * l.batch_in[d];
  }
}

// job(k) for k in [0, jobs) of `per_job` elements each (`total` in all) on oneTBB's threads, one
// task below two grains; with `stream`, each task's streamed lines are visible before it ends.
template <class F>
void each_job(int64_t jobs, int64_t total, int64_t per_job, bool stream, const F& job) {
  const int64_t grain = total < 2 * kParallelGrain ? jobs : task_grain((kParallelGrain + per_job - 1) / per_job);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, jobs, grain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t k = r.begin(); k < r.end(); ++k) job(k);
#if defined(__SSE2__)
    if (stream) _mm_sfence();
#else
    (void)stream;
#endif
  });
}

}  // namespace

template <class T>
bool transpose_copy(const detail::LoopDims& dims, const detail::LoopArg* args) {
  Layout l;
  if (!layout_of(dims, args, int64_t(sizeof(T)), l) || overlap<T>(dims, args)) return false;
  const int64_t total = l.ni * l.nj * l.batch_count;
  if (total < kTileMin) return false;
  const bool stream = total * int64_t(sizeof(T)) >= kStreamBytes;
  T* out = static_cast<T*>(args[0].data);
  const T* in = static_cast<const T*>(args[1].data);
  const int64_t blocks = (l.nj + kBlock - 1) / kBlock, jobs = blocks * l.batch_count;
  const int64_t per_job = kBlock * l.ni;
  each_job(jobs, total, per_job, stream, [&](int64_t job) {
    int64_t out_off = 0, in_off = 0;
    batch_offsets(l, job / blocks, out_off, in_off);
    const int64_t j0 = job % blocks * kBlock;
    rows<T>(l, out + out_off, in + in_off, j0, std::min(l.nj, j0 + kBlock), stream);
  });
  return true;
}

template <class T>
bool rows_copy(const detail::LoopDims& dims, const detail::LoopArg* args) {
  // The row: the innermost dim both operands hold contiguously; every other dim a batch of rows.
  int row = -1;
  for (int d = dims.rank - 1; d >= 0 && row < 0; --d)
    if (dims.sizes[d] > 1) row = args[0].strides[d] == 1 && args[1].strides[d] == 1 ? d : -2;
  if (row < 0 || dims.sizes[row] * int64_t(sizeof(T)) < kRowBytes) return false;
  Layout l;
  l.nj = dims.sizes[row];
  if (!batch_dims(dims, args, row, row, l)) return false;
  const int64_t total = l.nj * l.batch_count;
  if (total < kTileMin || overlap<T>(dims, args)) return false;
  const bool stream = total * int64_t(sizeof(T)) >= kStreamBytes;
  T* out = static_cast<T*>(args[0].data);
  const T* in = static_cast<const T*>(args[1].data);
  each_job(l.batch_count, total, l.nj, stream, [&](int64_t b) {
    int64_t out_off = 0, in_off = 0;
    batch_offsets(l, b, out_off, in_off);
    put_row(out + out_off, in + in_off, l.nj, stream);
  });
  return true;
}

template bool transpose_copy<double>(const detail::LoopDims&, const detail::LoopArg*);
template bool transpose_copy<float>(const detail::LoopDims&, const detail::LoopArg*);
template bool rows_copy<double>(const detail::LoopDims&, const detail::LoopArg*);
template bool rows_copy<float>(const detail::LoopDims&, const detail::LoopArg*);

}  // namespace tenax::cpu
