#pragma once
// The tiny contractions of the CPU backend (every group one axis or none, M, N, K <= 8, no batch)
// with their sizes known at compile time (all three up to 4; N up to 8, M and K read at run time), compiled
// once per instruction set like the Thomas panels (tridiagonal_thomas.h): contract.cpp includes this for the
// build's baseline and contract_avx2.cpp for AVX2 + FMA, chosen at run time. In an anonymous namespace on
// purpose: each including file gets its own copy, built with its own flags, and shares no symbol of it.
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include <xsimd/xsimd.hpp>

#include "tenax/backends/kernels.h"

namespace tenax::cpu {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per instruction set, see above

using FixedFn = detail::ReplayFn;
// A kernel on a ContractPlan as a plan's `run` (detail::replay_as).
template <void (*F)(const detail::ContractPlan&)>
constexpr FixedFn as_run = &detail::replay_as<detail::ContractPlan, F>;

// An element (or row) of z from its base b and its sum of products (ContractPlan::base): b + sum
// or, with sign -1, b - sum, to the bit (the product by the sign is exact), and without a branch.
template <class T, class S>
T with_base(T b, T sum, S sign) {
  return b + T(sign) * sum;
}

// Fully unrolled, strides at run time: any layout.
template <class T, int M, int N, int K>
void contract_fixed(const detail::ContractPlan& p) {
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  T* z = static_cast<T*>(p.z);
  T acc[M][N] = {};
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const T xv = x[m * p.mx + k * p.kx];
      for (int n = 0; n < N; ++n) acc[m][n] += xv * y[k * p.ky + n * p.ny];
    }
  const T* b = static_cast<const T*>(p.base);
  const auto sign = static_cast<T>(p.sign);
  const int64_t mz = p.mz, nz = p.nz;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const int64_t at = m * mz + n * nz;
      z[at] = b ? with_base(b[at], acc[m][n], sign) : acc[m][n];
    }
}

// The vector type holding W elements of T in this build (void: none).
template <class T, int W>
using Row = xsimd::make_sized_batch_t<T, static_cast<std::size_t>(W)>;

// How many elements of a row of z one vector holds: N itself where this build has a vector of N
// elements, else 2 where N is even and it has pairs, else 0 (no vector form).
template <class T, int N>
constexpr int row_width() {
  if constexpr (N > 1 && !std::is_void_v<Row<T, N>>) return N;
  if constexpr (N % 2 == 0 && !std::is_void_v<Row<T, 2>>) return 2;
  return 0;
}

// z[m, :] = Σ_k x[m, k] y[k, :] a row of z at a time (z's n stride 1), each x element broadcast
// once against y's rows held in registers. kRowsY: y's n stride is 1 (its rows are loaded as
// vectors); else each row of y is assembled from its elements once, up front.
template <class T, int M, int N, int K, bool kRowsY>
void contract_fixed_rows(const detail::ContractPlan& p) {
  constexpr int W = row_width<T, N>();
  using V = Row<T, W>;
  constexpr int NV = N / W;
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  T* z = static_cast<T*>(p.z);
  const T* base = static_cast<const T*>(p.base);
  const auto sign = static_cast<T>(p.sign);
  const int64_t mx = p.mx, kx = p.kx, mz = p.mz;
  V yk[K][NV];
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < NV; ++v) {
      const T* row = y + k * p.ky + v * W * p.ny;
      if constexpr (kRowsY)
        yk[k][v] = V::load_unaligned(row);
      else
        yk[k][v] = [&]<std::size_t... J>(std::index_sequence<J...>) {
          return V{row[static_cast<std::ptrdiff_t>(J) * p.ny]...};
        }
      (std::make_index_sequence<W>{});
    }
  for (int m = 0; m < M; ++m) {
    V acc[NV];
    for (int k = 0; k < K; ++k) {
      const V xv(x[m * mx + k * kx]);
      for (int v = 0; v < NV; ++v) acc[v] = k == 0 ? xv * yk[k][v] : xsimd::fma(xv, yk[k][v], acc[v]);
    }
    T* d = z + m * mz;
    for (int v = 0; v < NV; ++v) {
      if (base) acc[v] = with_base(V::load_unaligned(base + m * mz + v * W), acc[v], sign);
      acc[v].store_unaligned(d + v * W);
    }
  }
}

// Rewrites the plan of z = x y into that of zᵀ = yᵀ xᵀ (operands and their strides swapped; the
// caller swaps the sizes M and N it tracks).
inline void transpose_plan(detail::ContractPlan& p) {
  std::swap(p.x, p.y);
  std::swap(p.mx, p.ny);
  std::swap(p.kx, p.ky);
  std::swap(p.mz, p.nz);
}

// ---- sizes up to kMedium (at least one above 4): N compiled in, M and K read from the plan ----
constexpr int kMedium = 8;

// Elements of a row of z per vector for N columns: this build's full vector where it divides N,
// else pairs where N is even, else 0 (no vector form).
template <class T, int N>
constexpr int medium_width() {
  constexpr int native = static_cast<int>(xsimd::batch<T>::size);
  if constexpr (N % native == 0 && native > 1) return native;
  if constexpr (N % 2 == 0 && !std::is_void_v<Row<T, 2>>) return 2;
  return 0;
}

// z[m, :] = Σ_k x[m, k] y[k, :] a row of z at a time (z's n stride 1), as contract_fixed_rows,
// with M and K from the plan. kRowsY: y's rows are contiguous; else they are gathered once into a
// stack copy first.
template <class T, int N, bool kRowsY>
void contract_medium_rows(const detail::ContractPlan& p) {
  constexpr int W = medium_width<T, N>();
  using V = Row<T, W>;
  constexpr int NV = N / W;
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  T* z = static_cast<T*>(p.z);
  const T* base = static_cast<const T*>(p.base);
  const auto sign = static_cast<T>(p.sign);
  const int64_t M = p.m, K = p.k, mx = p.mx, kx = p.kx, mz = p.mz;
  int64_t ky = p.ky;
  [[maybe_unused]] alignas(64) T packed[kMedium * N];
  if constexpr (!kRowsY) {
    for (int64_t k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) packed[k * N + n] = y[k * p.ky + n * p.ny];
    y = packed;
    ky = N;
  }
  for (int64_t m = 0; m < M; ++m) {
    const T* xm = x + m * mx;
    V acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = V(T(0));
    for (int64_t k = 0; k < K; ++k) {
      const V xv(xm[k * kx]);
      const T* row = y + k * ky;
      for (int v = 0; v < NV; ++v) acc[v] = xsimd::fma(xv, V::load_unaligned(row + v * W), acc[v]);
    }
    T* d = z + m * mz;
    for (int v = 0; v < NV; ++v) {
      if (base) acc[v] = with_base(V::load_unaligned(base + m * mz + v * W), acc[v], sign);
      acc[v].store_unaligned(d + v * W);
    }
  }
}

// Any layout: N compiled in, M and K from the plan.
template <class T, int N>
void contract_medium_scalar(const detail::ContractPlan& p) {
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  T* z = static_cast<T*>(p.z);
  const T* b = static_cast<const T*>(p.base);
  const auto sign = static_cast<T>(p.sign);
  for (int64_t m = 0; m < p.m; ++m) {
    T acc[N] = {};
    for (int64_t k = 0; k < p.k; ++k) {
      const T xv = x[m * p.mx + k * p.kx];
      for (int n = 0; n < N; ++n) acc[n] += xv * y[k * p.ky + n * p.ny];
    }
    for (int n = 0; n < N; ++n) {
      const int64_t at = m * p.mz + n * p.nz;
      z[at] = b ? with_base(b[at], acc[n], sign) : acc[n];
    }
  }
}

template <class T, bool kRowsY, int I>
constexpr FixedFn medium_row_kernel() {
  if constexpr (medium_width<T, I + 1>() > 0)
    return as_run<&contract_medium_rows<T, I + 1, kRowsY>>;
  else
    return nullptr;
}
template <class T, bool kRowsY, int... I>
constexpr std::array<FixedFn, kMedium> medium_row_table(std::integer_sequence<int, I...> /*unused*/) {
  return {medium_row_kernel<T, kRowsY, I>()...};
}
template <class T, int... I>
constexpr std::array<FixedFn, kMedium> medium_scalar_table(std::integer_sequence<int, I...> /*unused*/) {
  return {as_run<&contract_medium_scalar<T, I + 1>>...};
}

// The kernel for sizes 1..kMedium: the row form where z's rows are contiguous, that of zᵀ = yᵀ xᵀ
// where its columns are (the plan swapped), the scalar form otherwise. Sets p.m and p.k.
template <class T>
FixedFn medium_kernel(detail::ContractPlan& p, int M, int N, int K) {
  static constexpr auto rows = medium_row_table<T, true>(std::make_integer_sequence<int, kMedium>{});
  static constexpr auto gathered = medium_row_table<T, false>(std::make_integer_sequence<int, kMedium>{});
  static constexpr auto scalar = medium_scalar_table<T>(std::make_integer_sequence<int, kMedium>{});
  p.m = M;
  p.k = K;
  const auto at = [](int n) { return static_cast<std::size_t>(n - 1); };
  if (p.nz == 1)
    if (FixedFn f = p.ny == 1 ? rows[at(N)] : gathered[at(N)]) return f;
  if (p.mz == 1) {
    if (FixedFn f = p.mx == 1 ? rows[at(M)] : gathered[at(M)]) {
      transpose_plan(p);
      p.m = N;
      return f;
    }
  }
  return scalar[at(N)];
}

// Kernel tables indexed (M-1) * 16 + (N-1) * 4 + (K-1); the row form is nullptr where N has no
// vector form in this build.
template <class T, int... I>
constexpr std::array<FixedFn, 64> scalar_table(std::integer_sequence<int, I...> /*unused*/) {
  return {as_run<&contract_fixed<T, I / 16 + 1, (I / 4) % 4 + 1, I % 4 + 1>>...};
}
template <class T, bool kRowsY, int I>
constexpr FixedFn row_kernel() {
  if constexpr (row_width<T, (I / 4) % 4 + 1>() > 0)
    return as_run<&contract_fixed_rows<T, I / 16 + 1, (I / 4) % 4 + 1, I % 4 + 1, kRowsY>>;
  else
    return nullptr;
}
template <class T, bool kRowsY, int... I>
constexpr std::array<FixedFn, 64> row_table(std::integer_sequence<int, I...> /*unused*/) {
  return {row_kernel<T, kRowsY, I>()...};
}

// The kernel for a plan of sizes M x N x K (each 1..4; above: medium_kernel) with its strides set: the row
// form where z's rows are contiguous and N has one; where z's columns are contiguous instead, the row form of
// zᵀ = yᵀ xᵀ (the plan's operands and strides swapped, its sizes M and N too); the scalar form otherwise. May
// rewrite `p` (the swap).
template <class T>
FixedFn fixed_kernel(detail::ContractPlan& p, int M, int N, int K) {
  if (M > 4 || N > 4 || K > 4) return medium_kernel<T>(p, M, N, K);
  static constexpr auto scalar = scalar_table<T>(std::make_integer_sequence<int, 64>{});
  static constexpr auto rows = row_table<T, true>(std::make_integer_sequence<int, 64>{});
  static constexpr auto gathered = row_table<T, false>(std::make_integer_sequence<int, 64>{});
  auto index = [K](int m, int n) { return static_cast<std::size_t>((m - 1) * 16 + (n - 1) * 4 + (K - 1)); };
  if (p.nz == 1)
    if (FixedFn f = p.ny == 1 ? rows[index(M, N)] : gathered[index(M, N)]) return f;
  if (p.mz == 1) {
    if (FixedFn f = p.mx == 1 ? rows[index(N, M)] : gathered[index(N, M)]) {
      transpose_plan(p);
      return f;
    }
  }
  return scalar[index(M, N)];
}

}  // namespace
}  // namespace tenax::cpu
