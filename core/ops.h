#pragma once
// The public op API. Every function here applies one registered op (core/ops/), so it runs on any
// device with kernels, records onto the tape when an input is tracked, and differentiates.
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

// ---- elementwise (operands broadcast by name; result: first operand's axes, then new ones) ----
#define TENAX_UNARY(name, f, df, saves) /** Elementwise name. */ Tensor name(const Tensor& x);
#define TENAX_BINARY(name, f, dfa, dfb, saves) \
  /** Elementwise name, broadcast by axis name. */ Tensor name(const Tensor& a, const Tensor& b);
#include "tenax/core/ops/elementwise.def"

/// cond ? a : b, elementwise; cond is a bool tensor; all three broadcast by name.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// a > b as a bool tensor (not differentiable).
Tensor greater(const Tensor& a, const Tensor& b);
/// a < b as a bool tensor (not differentiable).
Tensor less(const Tensor& a, const Tensor& b);
/// a == b as a bool tensor (not differentiable).
Tensor equal(const Tensor& a, const Tensor& b);
/// Explicit conversion between float64 and float32, and from a real dtype to a complex one
/// (imaginary part 0) or between complex128 and complex64 (the only ways dtypes change). complex
/// -> real is an Error: take real(z), imag(z) or abs(z).
Tensor astype(const Tensor& x, DType dtype);

// ---- complex numbers (docs/complex.md; abs(z) is |z|, a real result) ----
/// re + i im from two real tensors of one dtype (float64 -> complex128, float32 -> complex64),
/// broadcast by name.
Tensor complex(const Tensor& re, const Tensor& im);
/// The real part (a real tensor: itself).
Tensor real(const Tensor& z);
/// The imaginary part (a real tensor: zeros, not tracked).
Tensor imag(const Tensor& z);
/// The complex conjugate (a real tensor: itself).
Tensor conj(const Tensor& z);
/// The argument atan2(Im z, Re z) in (-pi, pi] (complex operands only).
Tensor angle(const Tensor& z);

// ---- reductions over named axes (no axes given: all axes) ----
/// Sum over every axis.
Tensor sum(const Tensor& x);
/// Sum over `axes`.
Tensor sum(const Tensor& x, const AxisList& axes);
/// Mean over every axis.
Tensor mean(const Tensor& x);
/// Mean over `axes`.
Tensor mean(const Tensor& x, const AxisList& axes);
/// Maximum over every axis (the gradient goes to every maximal element).
Tensor max(const Tensor& x);
/// Maximum over `axes`.
Tensor max(const Tensor& x, const AxisList& axes);
/// log Σ exp over every axis, computed stably.
Tensor logsumexp(const Tensor& x);
/// log Σ exp over `axes`.
Tensor logsumexp(const Tensor& x, const AxisList& axes);

// ---- contraction ----
/// Σ_over a * b: axes in `over` are summed (they must be in both); other shared axes are batch
/// axes; result: a's remaining axes in a's order, then b's. Matrix product: dot(A, B, {"k"}).
Tensor dot(const Tensor& a, const Tensor& b, const AxisList& over);

// ---- layout: views unless stated ----
/// Renames axis `from` to `to` (view).
Tensor rename(const Tensor& x, Name from, Name to);
/// Renames several axes at once (view).
Tensor rename(const Tensor& x, const AxisList& from, const AxisList& to);
/// Reorders axes to `order`, which names every axis (view).
Tensor transpose(const Tensor& x, const AxisList& order);
/// slice's stop meaning "to the end of the axis".
inline constexpr int64_t kToEnd = INT64_MAX;
/// Elements start, start+step, ... < stop along `axis` (view). A negative start or stop counts from
/// the end (-1: the last element); kToEnd (the default) is the axis size. After that,
/// 0 <= start <= stop <= size and step >= 1, or IndexError.
Tensor slice(const Tensor& x, Name axis, int64_t start, int64_t stop = kToEnd, int64_t step = 1);
/// The slice at `index` along `axis`, which disappears (view).
Tensor select(const Tensor& x, Name axis, int64_t index);
/// The diagonal (i, i) of the square matrices over (row, col), along `row`; `col` disappears
/// (view; its gradient reaches the diagonal only).
Tensor diagonal(const Tensor& x, Name row, Name col);
/// Adds the axes `extra` (not already present) with stride 0, after x's axes (view).
Tensor broadcast(const Tensor& x, const Axes& extra);
/// A dense row-major copy (the only layout op that copies).
Tensor contiguous(const Tensor& x);
/// Joins tensors along `axis`; every other axis must agree by name and size. Result: first
/// operand's axis order.
Tensor concat(const std::vector<Tensor>& xs, Name axis);
/// Stacks equal-axes tensors along a new outermost axis `axis`.
Tensor stack(const std::vector<Tensor>& xs, Name axis);
/// a at the even and b at the odd positions along `axis` (a has as many elements as b or one
/// more; their other axes agree): the inverse of slicing with step 2.
Tensor interleave(const Tensor& a, const Tensor& b, Name axis);

// ---- small dense linear algebra, batched over every other axis ----
/// Lower Cholesky factor of the SPD matrices over (row, col); reads the lower triangle.
/// Throws NumericError naming the batch index when a matrix is not positive definite.
Tensor cholesky(const Tensor& a, Name row, Name col);
/// Which triangle of the matrix triangular_solve reads (the other is taken as zero).
enum class Triangle { lower, upper };
/// Whether a solve uses the matrix (no) or its transpose (yes).
enum class Transpose { no, yes };
/// Solves T z = b for triangular T over (row, col) (Transpose::yes: Tᵀ z = b). b has the axis T's
/// equations run along (row; col when transposed); z has the other one in its place.
Tensor triangular_solve(const Tensor& t, const Tensor& b, Name row, Name col, Triangle triangle = Triangle::lower,
                        Transpose transpose = Transpose::no);
/// Solves A z = b (LU with partial pivoting); axes as for triangular_solve.
Tensor solve(const Tensor& a, const Tensor& b, Name row, Name col, Transpose transpose = Transpose::no);
/// log |det A| over (row, col); throws NumericError on a singular matrix.
Tensor logdet(const Tensor& a, Name row, Name col);

// ---- recurrences ----
/// x_t = a_t * x_{t-1} + b_t along `over` (x_{-1} = 0; fold an initial state into b's first step),
/// elementwise over every other axis; a and b broadcast by name, so a decay without `over` is
/// shared by every step. Runs along any axis in place (no transpose); its gradient is one
/// reverse-time recurrence, O(T), with no tree of residuals.
Tensor linear_recurrence(const Tensor& a, const Tensor& b, Name over);

// ---- tridiagonal systems ----
/// How tridiagonal_solve factorises: `thomas` (the default) eliminates without pivoting, the
/// fastest choice and stable for diagonally dominant or symmetric positive definite matrices
/// (diffusion, splines); `pivoting` is LU with partial pivoting, LAPACK gtsv's semantics, for
/// general matrices.
enum class Tridiagonal : int { thomas = 0, pivoting = 1 };
/// Solves A x = rhs for every tridiagonal system lying along the named axis `over`; every other
/// axis is a batch axis, aligned by name, so one matrix with many right-hand sides (or the
/// reverse) needs no copy, and an operand without `over` holds the same value on every row.
/// Row i of A is lower[i] (column i-1), diag[i], upper[i] (column i+1): LAPACK's and cuSPARSE's
/// layout stored at full length, lower[0] and upper[n-1] lie outside the matrix and are ignored
/// (their gradients are zero). x takes rhs's axis order. A zero or non-finite pivot raises
/// NumericError naming the system's batch index, and so does, for Thomas, a pivot so small against
/// its row that the elimination would lose more than half the digits (docs/robustness.md). The gradient solves one system with A^T and
/// stores nothing but x (implicit function theorem). Where lower, diag and upper have no batch
/// axis (one matrix for every system), the CPU factors that matrix once per call — either
/// algorithm — and each system reads only its right-hand side, several times faster than the
/// same matrix repeated per system: keep a shared matrix shared (do not broadcast it into a
/// per-system tensor first). A failed pivot of a shared matrix fails every system; the error
/// names the first.
Tensor tridiagonal_solve(const Tensor& lower, const Tensor& diag, const Tensor& upper, const Tensor& rhs,
                         Name over, Tridiagonal algorithm = Tridiagonal::thomas);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
/// Operators with a scalar use a rank-0 constant of the tensor's dtype.
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);

}  // namespace tenax
