// CPU contraction z[b,m,n] (+)= Σ_k x[b,m,k] y[b,k,n] (real and complex): fixed-size kernels for tiny matrices
// (sizes <= 8, contract_fixed.h, with an AVX2 build; per batch entry when batched), axpy rows or
// dot products where one axis is wide and the others tiny, direct loops for small ones, BLAS gemm
// (strided in place when each group is one dim with a unit stride, packed otherwise) for large ones.
#include <cblas.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <complex>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenax/backends/cpu/avx2.h"
#include "tenax/backends/cpu/complex_rows.h"
#include "tenax/backends/cpu/contract_fixed.h"
#include "tenax/backends/cpu/product.h"
#include "tenax/backends/cpu/register.h"

namespace tenax::cpu {
namespace {

using detail::ContractArgs;
using detail::ContractGroup;

// Per-matrix work from which BLAS beats direct loops (call overhead vs. blocking and SIMD).
constexpr int64_t kBlasWork = 4096;

int64_t group_size(const ContractGroup& g) {
  int64_t n = 1;
  for (int d = 0; d < g.rank; ++d) n *= g.sizes[d];
  return n;
}

// Offsets of every flat index of group g, for the operand whose strides are `st`.
void offsets(const ContractGroup& g, const int64_t* st, std::vector<int64_t>& out) {
  out.assign(static_cast<size_t>(group_size(g)), 0);
  int64_t idx[detail::kMaxLoopRank] = {};
  int64_t off = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = off;
    for (int d = g.rank - 1; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < g.sizes[d]) break;
      off -= st[d] * g.sizes[d];
      idx[d] = 0;
    }
  }
}

struct Scratch {
  std::vector<int64_t> bx, by, bz, mx, mz, nyo, nz, kx, ky;
  std::vector<double> pack;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Calls f(ox, oy, oz) with the element offsets of x, y and z of every entry of a batch of at most
// two axes (no axis: one entry at offsets 0).
template <class F>
void each_batch_entry(const ContractGroup& g, F&& f) {
  const int64_t n0 = g.rank > 0 ? g.sizes[0] : 1, n1 = g.rank > 1 ? g.sizes[1] : 1;
  const int64_t x0 = g.rank > 0 ? g.x[0] : 0, y0 = g.rank > 0 ? g.y[0] : 0, z0 = g.rank > 0 ? g.z[0] : 0;
  const int64_t x1 = g.rank > 1 ? g.x[1] : 0, y1 = g.rank > 1 ? g.y[1] : 0, z1 = g.rank > 1 ? g.z[1] : 0;
  for (int64_t b0 = 0; b0 < n0; ++b0)
    for (int64_t b1 = 0; b1 < n1; ++b1) f(b0 * x0 + b1 * x1, b0 * y0 + b1 * y1, b0 * z0 + b1 * z1);
}

// A group as a single BLAS dimension: its size and stride (one dim, or none: size 1).
bool single(const ContractGroup& g, const int64_t* st, int64_t& size, int64_t& stride) {
  if (g.rank > 1) return false;
  size = g.rank ? g.sizes[0] : 1;
  stride = g.rank ? st[0] : 0;
  return true;
}

// How BLAS sees a rows x cols matrix with strides (sr, sc) in the given storage order.
bool blas_view(CBLAS_ORDER order, int64_t rows, int64_t cols, int64_t sr, int64_t sc,
               CBLAS_TRANSPOSE& trans, int64_t& ld) {
  if (rows == 1) sr = order == CblasRowMajor ? std::max<int64_t>(cols, 1) : 1;
  if (cols == 1) sc = order == CblasRowMajor ? 1 : std::max<int64_t>(rows, 1);
  if (order == CblasRowMajor) {
    if (sc == 1 && sr >= std::max<int64_t>(cols, 1)) { trans = CblasNoTrans; ld = sr; return true; }
    if (sr == 1 && sc >= std::max<int64_t>(rows, 1)) { trans = CblasTrans; ld = sc; return true; }
  } else {
    if (sr == 1 && sc >= std::max<int64_t>(rows, 1)) { trans = CblasNoTrans; ld = sc; return true; }
    if (sc == 1 && sr >= std::max<int64_t>(cols, 1)) { trans = CblasTrans; ld = sr; return true; }
  }
  return false;
}

template <class T>
void blas_gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, std::complex<double>>) {
    const T one(1);
    cblas_zgemm(o, ta, tb, int(m), int(n), int(k), &one, a, int(lda), b, int(ldb), &beta, c, int(ldc));
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    const T one(1);
    cblas_cgemm(o, ta, tb, int(m), int(n), int(k), &one, a, int(lda), b, int(ldb), &beta, c, int(ldc));
  } else if constexpr (sizeof(T) == 8) {
    cblas_dgemm(o, ta, tb, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
  } else {
    cblas_sgemm(o, ta, tb, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
  }
}

// z = a b (+ beta z) with z NoTrans in `o`'s order. BLAS runs one thread (register_contract): a
// product large enough to pay is split by rows of z across oneTBB's workers instead, so BLAS never
// spins a thread pool of its own beside oneTBB's (inside a parallel map chunk both did),
// set_num_threads and the caller's task_arena govern it, and each element is the one-thread
// kernel's sum over k whatever the split: the same bits at any thread count.
template <class T>
void gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
          const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  // One block of rows per thread of the arena (each block packs b again: no more blocks than that),
  // none smaller than kTaskWork multiply-adds.
  constexpr int64_t kTaskWork = int64_t{1} << 21;
  const int64_t min_rows = std::max<int64_t>(8, kTaskWork / std::max<int64_t>(n * k, 1));
  const int64_t blocks = std::min<int64_t>(tbb::this_task_arena::max_concurrency(), m / min_rows);
  if (blocks < 2) {
    blas_gemm<T>(o, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t grain = (m + blocks - 1) / blocks;
  // Row i of z starts at i ldc (row-major) or i (column-major); row i of op(a) at i lda where a's
  // rows are its stored rows (row-major and not transposed, or column-major and transposed), else i.
  const bool a_by_rows = (o == CblasRowMajor) == (ta == CblasNoTrans);
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, m, grain),
      [&](const tbb::blocked_range<int64_t>& r) {
        const int64_t m0 = r.begin();
        blas_gemm<T>(o, ta, tb, static_cast<int64_t>(r.size()), n, k, a + (a_by_rows ? m0 * lda : m0), lda, b,
                     ldb, beta, c + (o == CblasRowMajor ? m0 * ldc : m0), ldc);
      },
      tbb::simple_partitioner());
}

// Tries gemm on the operands in place; false when a layout needs packing.
template <class T>
bool gemm_in_place(const ContractArgs& a, const std::vector<int64_t>& bx,
                   const std::vector<int64_t>& by, const std::vector<int64_t>& bz) {
  int64_t M, N, K, xm, xk, yk, yn, zm, zn, unused;
  if (!single(a.m, a.m.x, M, xm) || !single(a.m, a.m.z, M, zm) || !single(a.n, a.n.y, N, yn) ||
      !single(a.n, a.n.z, N, zn) || !single(a.k, a.k.x, K, xk) || !single(a.k, a.k.y, K, yk))
    return false;
  (void)unused;
  CBLAS_ORDER order;
  int64_t ldz;
  CBLAS_TRANSPOSE tz;
  if (blas_view(CblasRowMajor, M, N, zm, zn, tz, ldz) && tz == CblasNoTrans) order = CblasRowMajor;
  else if (blas_view(CblasColMajor, M, N, zm, zn, tz, ldz) && tz == CblasNoTrans) order = CblasColMajor;
  else return false;
  CBLAS_TRANSPOSE tx, ty;
  int64_t ldx, ldy;
  if (!blas_view(order, M, K, xm, xk, tx, ldx) || !blas_view(order, K, N, yk, yn, ty, ldy)) return false;
  const T* x = static_cast<const T*>(a.x);
  const T* y = static_cast<const T*>(a.y);
  T* z = static_cast<T*>(a.z);
  for (size_t b = 0; b < bx.size(); ++b)
    gemm<T>(order, tx, ty, M, N, K, x + bx[b], ldx, y + by[b], ldy, a.accumulate ? T(1) : T(0),
            z + bz[b], ldz);
  return true;
}

// Small contractions whose m, n and k groups are single axes (or none) and whose batch has at
// most two axes: plain strided loops, no offset tables (the common case of replayed scan steps,
// where building the tables cost more than the arithmetic).
template <class T>
bool contract_small(const ContractArgs& a) {
  if (a.m.rank > 1 || a.n.rank > 1 || a.k.rank > 1 || a.batch.rank > 2) return false;
  int64_t M, N, K, mx, mz, ny, nz, kx, ky, unused;
  single(a.m, a.m.x, M, mx);
  single(a.m, a.m.z, unused, mz);
  single(a.n, a.n.y, N, ny);
  single(a.n, a.n.z, unused, nz);
  single(a.k, a.k.x, K, kx);
  single(a.k, a.k.y, unused, ky);
  if (M * N * K >= kBlasWork) return false;
  const int64_t B0 = a.batch.rank > 0 ? a.batch.sizes[0] : 1, B1 = a.batch.rank > 1 ? a.batch.sizes[1] : 1;
  const int64_t bx0 = a.batch.rank > 0 ? a.batch.x[0] : 0, by0 = a.batch.rank > 0 ? a.batch.y[0] : 0,
                bz0 = a.batch.rank > 0 ? a.batch.z[0] : 0;
  const int64_t bx1 = a.batch.rank > 1 ? a.batch.x[1] : 0, by1 = a.batch.rank > 1 ? a.batch.y[1] : 0,
                bz1 = a.batch.rank > 1 ? a.batch.z[1] : 0;
  const T* x = static_cast<const T*>(a.x);
  const T* y = static_cast<const T*>(a.y);
  T* z = static_cast<T*>(a.z);
  for (int64_t b0 = 0; b0 < B0; ++b0)
    for (int64_t b1 = 0; b1 < B1; ++b1) {
      const T* xb = x + b0 * bx0 + b1 * bx1;
      const T* yb = y + b0 * by0 + b1 * by1;
      T* zb = z + b0 * bz0 + b1 * bz1;
      for (int64_t m = 0; m < M; ++m) {
        const T* xm = xb + m * mx;
        int64_t n = 0;
        // Four outputs per pass over k: each x element loaded once, four sums in registers.
        for (; n + 4 <= N; n += 4) {
          const T* yn = yb + n * ny;
          T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
          for (int64_t k = 0; k < K; ++k) {
            const T xv = xm[k * kx];
            const T* yk = yn + k * ky;
            s0 += prod(xv, yk[0]);
            s1 += prod(xv, yk[ny]);
            s2 += prod(xv, yk[2 * ny]);
            s3 += prod(xv, yk[3 * ny]);
          }
          T* dst = zb + m * mz + n * nz;
          const T sum[4] = {s0, s1, s2, s3};
          for (int j = 0; j < 4; ++j) dst[j * nz] = a.accumulate ? dst[j * nz] + sum[j] : sum[j];
        }
        for (; n < N; ++n) {
          const T* yn = yb + n * ny;
          T acc = T(0);
          for (int64_t k = 0; k < K; ++k) acc += prod(xm[k * kx], yn[k * ky]);
          T& dst = zb[m * mz + n * nz];
          dst = a.accumulate ? dst + acc : acc;
        }
      }
    }
  return true;
}

// Moves the outer dims of an m or n group of several dims into the batch (up to two batch axes),
// so that the loops of one dim per group take the product: the reverse rule of a dot with a
// parameter, z[h, i, basis] += g[h, basis] x[i], as 64 axpy passes per h.
void outer_dims_to_batch(ContractArgs& a) {
  auto move = [&](ContractGroup& g, bool in_x) {
    while (g.rank > 1 && a.batch.rank < 2) {
      const int b = a.batch.rank++;
      a.batch.sizes[b] = g.sizes[0];
      a.batch.x[b] = in_x ? g.x[0] : 0;
      a.batch.y[b] = in_x ? 0 : g.y[0];
      a.batch.z[b] = g.z[0];
      for (int d = 1; d < g.rank; ++d) {
        g.sizes[d - 1] = g.sizes[d];
        g.x[d - 1] = g.x[d];
        g.y[d - 1] = g.y[d];
        g.z[d - 1] = g.z[d];
      }
      --g.rank;
    }
  };
  move(a.m, true);
  move(a.n, false);
}

// Merges neighbouring dims of a group that every operand walks as one (the outer dim's stride is
// the inner one's times its size; absent operands have stride 0 in both).
void merge_dims(ContractGroup& g) {
  for (int d = g.rank - 2; d >= 0; --d) {
    const int64_t n = g.sizes[d + 1];
    if (g.x[d] != g.x[d + 1] * n || g.y[d] != g.y[d + 1] * n || g.z[d] != g.z[d + 1] * n) continue;
    g.sizes[d] *= n;
    g.x[d] = g.x[d + 1];
    g.y[d] = g.y[d + 1];
    g.z[d] = g.z[d + 1];
    for (int k = d + 1; k + 1 < g.rank; ++k) {
      g.sizes[k] = g.sizes[k + 1];
      g.x[k] = g.x[k + 1];
      g.y[k] = g.y[k + 1];
      g.z[k] = g.z[k + 1];
    }
    --g.rank;
  }
}

// The size and stride of a group whose dims of size > 1 number at most one; false otherwise.
// Unlike single(), which routes groups of several dims to the offset-table loops (measured faster
// there, and merging the two helpers measurably slowed the state-8 Kalman step), size-1 dims are
// ignored: tiny contractions of an nmap'd step carry them.
bool squeeze(const ContractGroup& g, const int64_t* st, int64_t& size, int64_t& stride) {
  size = 1;
  stride = 0;
  for (int d = 0; d < g.rank; ++d) {
    if (g.sizes[d] == 1) continue;
    if (size != 1) return false;
    size = g.sizes[d];
    stride = st[d];
  }
  return true;
}

template <class T>
bool contract_plan(const ContractArgs& args, detail::ContractPlan& p) {
  if (group_size(args.batch) != 1) return false;
  // Dims that every operand walks as one count as one (a tangent's or cotangent's basis axes).
  ContractArgs a = args;
  for (ContractGroup* g : {&a.m, &a.n, &a.k}) merge_dims(*g);
  int64_t M, N, K, unused;
  if (!squeeze(a.m, a.m.x, M, p.mx) || !squeeze(a.m, a.m.z, unused, p.mz) || !squeeze(a.n, a.n.y, N, p.ny) ||
      !squeeze(a.n, a.n.z, unused, p.nz) || !squeeze(a.k, a.k.x, K, p.kx) ||
      !squeeze(a.k, a.k.y, unused, p.ky))
    return false;
  if (M > kMedium || N > kMedium || K > kMedium || M * N * K == 0) return false;
  p.x = a.x;
  p.y = a.y;
  p.z = a.z;
  p.base = a.accumulate ? a.z : nullptr;
  p.mn = M * N;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
#if defined(TENAX_HAVE_AVX2_KERNELS)
  if (cpu_avx2()) {
    p.run = std::is_same_v<T, double> ? fixed_kernel_avx2_f64(p, m, n, k) : fixed_kernel_avx2_f32(p, m, n, k);
    return true;
  }
#endif
  p.run = fixed_kernel<T>(p, m, n, k);
  return true;
}

template <class T>
bool contract_tiny(const ContractArgs& a) {
  detail::ContractPlan p;
  if (!contract_plan<T>(a, p)) return false;
  p.run(p);
  return true;
}

// A batch (at most two axes) of tiny contractions: each entry through the resolved fixed-size
// kernel of one (a Kalman step over 256 series: its 4 x 4 products ran the strided loops of
// contract_small at about twice the instructions).
template <class T>
bool contract_tiny_batch(const ContractArgs& a) {
  if (a.batch.rank > 2 || group_size(a.batch) == 1) return false;  // one entry: contract_tiny's
  ContractArgs one = a;
  one.batch.rank = 0;
  detail::ContractPlan p;
  if (!contract_plan<T>(one, p)) return false;
  // The plan may compute zᵀ = yᵀ xᵀ (its operands swapped): each then moves by the other's batch
  // strides. Where that cannot be told (one buffer for both, z's strides alike), the loops do it.
  int64_t mz = 0, nz = 0, unused = 0;
  squeeze(a.m, a.m.z, unused, mz);
  squeeze(a.n, a.n.z, unused, nz);
  const bool straight = p.x == a.x && p.y == a.y && p.mz == mz && p.nz == nz;
  const bool swapped = p.x == a.y && p.y == a.x && p.mz == nz && p.nz == mz;
  if (straight == swapped) return false;
  ContractGroup batch = a.batch;
  if (swapped) std::swap(batch.x, batch.y);
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  T* z = static_cast<T*>(a.z);
  each_batch_entry(batch, [&](int64_t ox, int64_t oy, int64_t oz) {
    p.x = x + ox;
    p.y = y + oy;
    p.z = z + oz;
    p.base = a.accumulate ? p.z : nullptr;
    p.run(p);
  });
  return true;
}

// row[j] = ce · vr[j * vj] (`first`) or += for j < w; complex rows of unit stride in vectors first.
template <class T>
void axpy_pass(T* row, int64_t w, T ce, const T* vr, int64_t vj, bool first) {
  int64_t j = 0;
  if constexpr (!std::is_floating_point_v<T>)
    if (vj == 1) j = complex_product_rows(w, row, 1, vr, 1, &ce, 0, first ? 0 : kComplexAccumulate);
  if (first && vj == 1) {
    for (; j < w; ++j) row[j] = prod(ce, vr[j]);
  } else if (first) {
    for (; j < w; ++j) row[j] = prod(ce, vr[j * vj]);
  } else if (vj == 1) {
    for (; j < w; ++j) row[j] += prod(ce, vr[j]);
  } else {
    for (; j < w; ++j) row[j] += prod(ce, vr[j * vj]);
  }
}

// z[r, j] (+)= Σ_k c[r, k] · v[k, j] for r < R, j < W: each row of z (unit stride along j) built in
// a buffer by axpy passes over k in order (the sums the direct loops form, to the bit), then
// stored or added.
template <class T>
void axpy_rows(int64_t R, int64_t W, int64_t K, const T* c, int64_t cr, int64_t ck, const T* v, int64_t vk,
               int64_t vj, T* z, int64_t zr, bool accumulate) {
  if (K == 1 && accumulate && vj == 1) {  // an outer product added in: one pass, no row buffer
    for (int64_t r = 0; r < R; ++r) axpy_pass(z + r * zr, W, c[r * cr], v, 1, false);
    return;
  }
  constexpr int64_t kChunk = 256;
  T row[kChunk];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j0 = 0; j0 < W; j0 += kChunk) {
      const int64_t w = std::min(kChunk, W - j0);
      for (int64_t k = 0; k < K; ++k) axpy_pass(row, w, c[r * cr + k * ck], v + k * vk + j0 * vj, vj, k == 0);
      T* out = z + r * zr + j0;
      if (accumulate) {
        for (int64_t j = 0; j < w; ++j) out[j] += row[j];
      } else {
        for (int64_t j = 0; j < w; ++j) out[j] = row[j];
      }
    }
}

// Products with one wide axis (at least kWide: many series) and the other two small (at most kMedium): a
// shared matrix times many series (z contiguous along the series: rows of axpy passes) or their sum over the
// series (dot products, four partial sums), where BLAS would not run in place (`below_blas`: only below
// kBlasWork). The direct and offset-table loops and the packed BLAS calls they took cost up to twice the
// instructions (the Kalman step over 256 series); in-place BLAS stays ahead (8 x 8 by 256). Batch: at most
// two axes.
constexpr int64_t kWide = 16;
template <class T>
bool contract_wide(const ContractArgs& a, bool below_blas) {
  if (a.batch.rank > 2 || std::max({group_size(a.m), group_size(a.n), group_size(a.k)}) < kWide) return false;
  int64_t M, N, K, mx, mz, ny, nz, kx, ky, unused;
  if (!squeeze(a.m, a.m.x, M, mx) || !squeeze(a.m, a.m.z, unused, mz) || !squeeze(a.n, a.n.y, N, ny) ||
      !squeeze(a.n, a.n.z, unused, nz) || !squeeze(a.k, a.k.x, K, kx) || !squeeze(a.k, a.k.y, unused, ky))
    return false;
  const bool wide_n = N >= kWide && nz == 1 && M <= kMedium && K <= kMedium;
  const bool wide_m = M >= kWide && mz == 1 && N <= kMedium && K <= kMedium;
  const bool wide_k = K >= kWide && M <= kMedium && N <= kMedium;
  if ((!wide_n && !wide_m && !wide_k) || (below_blas && M * N * K >= kBlasWork)) return false;
  each_batch_entry(a.batch, [&](int64_t ox, int64_t oy, int64_t oz) {
    const T* x = static_cast<const T*>(a.x) + ox;
    const T* y = static_cast<const T*>(a.y) + oy;
    T* z = static_cast<T*>(a.z) + oz;
    if (wide_n) {
      axpy_rows(M, N, K, x, mx, kx, y, ky, ny, z, mz, a.accumulate);
    } else if (wide_m) {
      axpy_rows(N, M, K, y, ny, ky, x, kx, mx, z, nz, a.accumulate);
    } else {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const T* xm = x + m * mx;
          const T* yn = y + n * ny;
          T s[4] = {T(0), T(0), T(0), T(0)};
          int64_t k = 0;
          for (; k + 4 <= K; k += 4)
            for (int j = 0; j < 4; ++j) s[j] += prod(xm[(k + j) * kx], yn[(k + j) * ky]);
          for (; k < K; ++k) s[0] += prod(xm[k * kx], yn[k * ky]);
          const T sum = (s[0] + s[1]) + (s[2] + s[3]);
          T& dst = z[m * mz + n * nz];
          dst = a.accumulate ? dst + sum : sum;
        }
    }
  });
  return true;
}

// Any contraction: gemm (in place or packed) for large ones, loops over offset tables otherwise.
// The complex dtypes' kernel (complex gemm: zgemm, cgemm); the real ones try their fast paths first.
template <class T>
void contract_general(const ContractArgs& a) {
  Scratch& s = scratch();
  offsets(a.batch, a.batch.x, s.bx);
  offsets(a.batch, a.batch.y, s.by);
  offsets(a.batch, a.batch.z, s.bz);
  const int64_t M = group_size(a.m), N = group_size(a.n), K = group_size(a.k);
  const T* x = static_cast<const T*>(a.x);
  const T* y = static_cast<const T*>(a.y);
  T* z = static_cast<T*>(a.z);
  if (M * N * K >= kBlasWork && gemm_in_place<T>(a, s.bx, s.by, s.bz)) return;
  if (contract_wide<T>(a, false)) return;
  offsets(a.m, a.m.x, s.mx);
  offsets(a.m, a.m.z, s.mz);
  offsets(a.n, a.n.y, s.nyo);
  offsets(a.n, a.n.z, s.nz);
  offsets(a.k, a.k.x, s.kx);
  offsets(a.k, a.k.y, s.ky);
  if (M * N * K >= kBlasWork) {
    // Pack x as M x K and y as K x N (row-major), gemm into M x N, scatter into z.
    s.pack.resize(static_cast<size_t>((M * K + K * N + M * N) * sizeof(T) / sizeof(double) + 3));
    T* px = reinterpret_cast<T*>(s.pack.data());
    T* py = px + M * K;
    T* pz = py + K * N;
    for (size_t b = 0; b < s.bx.size(); ++b) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) px[m * K + k] = x[s.bx[b] + s.mx[m] + s.kx[k]];
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) py[k * N + n] = y[s.by[b] + s.ky[k] + s.nyo[n]];
      gemm<T>(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, px, K, py, N, T(0), pz, N);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          T& dst = z[s.bz[b] + s.mz[m] + s.nz[n]];
          dst = a.accumulate ? dst + pz[m * N + n] : pz[m * N + n];
        }
    }
    return;
  }
  for (size_t b = 0; b < s.bx.size(); ++b) {
    const T* xb = x + s.bx[b];
    const T* yb = y + s.by[b];
    T* zb = z + s.bz[b];
    for (int64_t m = 0; m < M; ++m) {
      const T* xm = xb + s.mx[m];
      for (int64_t n = 0; n < N; ++n) {
        const T* yn = yb + s.nyo[n];
        T acc = T(0);
        for (int64_t k = 0; k < K; ++k) acc += prod(xm[s.kx[k]], yn[s.ky[k]]);
        T& dst = zb[s.mz[m] + s.nz[n]];
        dst = a.accumulate ? dst + acc : acc;
      }
    }
  }
}

// What the loops above did not take, with dims merged and outer ones moved to the batch (as for the
// complex dtypes): a tangent's or cotangent's basis axes beside the primal's axes (the forward
// Jacobian of a scan step: (h, h_in, h2_in) by h2), which the offset-table loops ran at several
// times the arithmetic's cost.
template <class T>
bool contract_merged(const ContractArgs& args) {
  ContractArgs a = args;
  for (ContractGroup* g : {&a.batch, &a.m, &a.n, &a.k}) merge_dims(*g);
  outer_dims_to_batch(a);
  return contract_tiny<T>(a) || contract_tiny_batch<T>(a) || contract_wide<T>(a, true) ||
         contract_small<T>(a);
}

template <class T>
void contract(const ContractArgs& a) {
  if (contract_tiny<T>(a) || contract_tiny_batch<T>(a) || contract_wide<T>(a, true) || contract_small<T>(a) ||
      contract_merged<T>(a))
    return;
  contract_general<T>(a);
}

// The complex dtypes: no fixed-size kernels (they are real); with dims merged where the operands
// allow and outer ones moved to the batch, the axpy rows, the direct loops and BLAS's zgemm / cgemm.
template <class T>
void contract_complex(const ContractArgs& args) {
  ContractArgs a = args;
  for (ContractGroup* g : {&a.batch, &a.m, &a.n, &a.k}) merge_dims(*g);
  outer_dims_to_batch(a);
  if (contract_wide<T>(a, true) || contract_small<T>(a)) return;
  contract_general<T>(a);  // per batch entry zgemm in place where each group is then one dim
}

}  // namespace

void register_contract(detail::KernelTable& t) {
#if defined(OPENBLAS_VERSION)
  openblas_set_num_threads(1);  // Tenax splits large products across oneTBB's workers itself (gemm)
#endif
  t.contract[0] = contract<double>;
  t.contract[1] = contract<float>;
  t.contract[2] = contract_complex<std::complex<double>>;
  t.contract[3] = contract_complex<std::complex<float>>;
  t.contract_plan[0] = contract_plan<double>;
  t.contract_plan[1] = contract_plan<float>;
}

}  // namespace tenax::cpu
