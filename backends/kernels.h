#pragma once
// The interface between core and the backends: a table of kernels on raw pointers and element
// strides. No names, no tape. Each backend fills one table in its register_*_kernels().
#include <string>
#include <cstddef>
#include <cstdint>

#include "tenax/core/device.h"

namespace tenax {
class Allocator;
}

namespace tenax::detail {

/// Most loop dimensions a kernel sees (equals tenax::kMaxRank).
inline constexpr int kMaxLoopRank = 8;

/// The index space of an elementwise loop: sizes of up to kMaxLoopRank dimensions.
struct LoopDims {
  int rank = 0;
  int64_t sizes[kMaxLoopRank] = {};
};

/// One operand of a loop: element pointer and element strides over the loop dims (0 = broadcast).
struct LoopArg {
  void* data = nullptr;
  int64_t strides[kMaxLoopRank] = {};
};

enum class UnaryOp : int {
#define TENAX_UNARY(name, f, df, saves) name,
#include "tenax/core/ops/elementwise.def"
  count
};
enum class BinaryOp : int {
#define TENAX_BINARY(name, f, dfa, dfb, saves) name,
#include "tenax/core/ops/elementwise.def"
  count
};
/// Derivative functors D for the fused "dst += g * D(p0, p1, p2)" kernel: one per unary op
/// (D(x, y)), two per binary op (D(a, b, y) for each side), plus the reduction rules.
enum class DerivOp : int {
#define TENAX_UNARY(name, f, df, saves) unary_##name,
#include "tenax/core/ops/elementwise.def"
#define TENAX_BINARY(name, f, dfa, dfb, saves) name##_a, name##_b,
#include "tenax/core/ops/elementwise.def"
  one,          ///< D = 1
  argmax_mask,  ///< D(x, y) = x == y
  softmax,      ///< D(x, y) = exp(x - y)   (logsumexp)
  count
};
enum class CompareOp : int { greater, less, equal };

/// Elementwise kernel: args[0] is the output (or accumulator), the rest are inputs.
using ElementwiseFn = void (*)(const LoopDims& dims, const LoopArg* args);

/// One operand of a loop over at most two dimensions: element pointer, inner and outer strides.
struct FlatArg {
  void* data = nullptr;
  int64_t stride = 0;
  int64_t outer_stride = 0;
};
/// The flat twin of an elementwise kernel: the same computation over `outer` rows of n elements,
/// with no planning and no parallel split (what a captured scan step replays for its small
/// calls). Every operand is present: an absent one points at a zero with strides 0.
using FlatFn = void (*)(int64_t outer, int64_t n, const FlatArg* args);
/// The scalar twin of an elementwise kernel: the same computation on ONE element, p[i] pointing at
/// operand i's element (what a fused loop of single-element scan steps calls; core/ops/scalar_loop.h).
using ScalarFn = void (*)(void* const* p);

/// Contraction z[b, m, n] (+)= Σ_k x[b, m, k] y[b, k, n] where each of b, m, n, k is a group of
/// up to kMaxLoopRank dims with per-operand strides (a dim absent from an operand has stride 0).
struct ContractGroup {
  int rank = 0;
  int64_t sizes[kMaxLoopRank] = {};
  int64_t x[kMaxLoopRank] = {}, y[kMaxLoopRank] = {}, z[kMaxLoopRank] = {};
};
struct ContractArgs {
  const void* x = nullptr;
  const void* y = nullptr;
  void* z = nullptr;
  ContractGroup batch, m, n, k;
  bool accumulate = false;  ///< add into z instead of overwriting it
};
using ContractFn = void (*)(const ContractArgs& args);
/// A call resolved once for replays that a replay runs through one pointer (core/ops/capture.h):
/// `run` is the kernel chosen at planning for the derived record (ContractPlan, InlineCall), which
/// casts its argument back to that record (replay_as).
struct Replayed;
using ReplayFn = void (*)(const Replayed& self);
struct Replayed {
  ReplayFn run = nullptr;
};
/// The ReplayFn of kernel F on the record type D: F inlined into a cast.
template <class D, void (*F)(const D&)>
void replay_as(const Replayed& self) {
  F(static_cast<const D&>(self));
}
/// A contraction resolved once, for replays (a captured scan step): the kernel with its operands'
/// pointers and strides, so that a replay neither re-reads ContractArgs nor re-plans the loops.
struct ContractPlan : Replayed {
  const void* x = nullptr;
  const void* y = nullptr;
  void* z = nullptr;
  int64_t mx = 0, kx = 0, ky = 0, ny = 0, mz = 0, nz = 0;
  int64_t m = 0, k = 0;  ///< sizes read at run time (the kernels for sizes above 4); n is compiled in
  /// z = base + sign · x·y with sign +1 or -1, base read at z's strides; base == z accumulates;
  /// null: z = x·y (sign unused). A replay may point base elsewhere (core/ops/contraction_fusion.cpp).
  const void* base = nullptr;
  double sign = 1.0;
  int64_t mn = 0;  ///< how many elements of z it writes (M · N)
};
/// Fills `plan` when the backend has a resolved form for this contraction (false: replay the call).
using ContractPlanFn = bool (*)(const ContractArgs& args, ContractPlan& plan);

/// A square matrix view: a[i][j] = data[i * rs + j * cs].
struct MatView {
  void* data = nullptr;
  int64_t n = 0, rs = 0, cs = 0;
};
/// Batched square-matrix kernels; `count` matrices, matrix b at `offsets[b]` elements from the base
/// pointers. They return the index of the first matrix that failed (not PD, singular) or -1.
struct MatBatch {
  int64_t count = 0;
  const int64_t* offsets_a = nullptr;  // per matrix, into a
  const int64_t* offsets_b = nullptr;  // per matrix, into b (second operand / output)
  const int64_t* offsets_c = nullptr;  // per matrix, into c (third operand) when used
  /// CUDA only, set by recorded scan programs: the offsets above are DEVICE pointers, and the
  /// kernel neither uploads nor waits: it lowers *deferred_failure (atomic min) to the first failed
  /// matrix and returns -1. The program reads the word when its sweep ends (KernelProgram::finish).
  unsigned long long* deferred_failure = nullptr;
};
/// L = chol(A) (lower; reads A's lower triangle; writes zeros above the diagonal).
using CholeskyFn = int64_t (*)(MatView a, MatView l, const MatBatch& batch);
/// Triangular solve with `nrhs` columns: solves T z = r where T is lower (or upper), in place on r.
/// r's column c, element i at r.data[i * r.rs + c * r.cs].
struct RhsView {
  void* data = nullptr;
  int64_t n = 0, nrhs = 0, rs = 0, cs = 0;
};
using TriSolveFn = int64_t (*)(MatView t, RhsView r, bool lower, const MatBatch& batch);
/// General solve A z = r in place on r (LU with partial pivoting, LAPACK getrf/getrs).
using SolveFn = int64_t (*)(MatView a, RhsView r, const MatBatch& batch);
/// log|det A| per matrix into out[offsets_b[b]]; with `inv_t`, also writes A^{-T} (c operand).
using LogdetFn = int64_t (*)(MatView a, void* out, MatView inv_t, bool want_inverse,
                             const MatBatch& batch);
/// Reverse rule of Cholesky: Abar from L and Lbar (see core/ops/linalg.cpp for the formula).
using CholeskyVjpFn = void (*)(MatView l, MatView lbar, MatView abar, const MatBatch& batch);
/// The square-matrix kernels above on ONE matrix, resolved once for replays (a captured host scan
/// step): the backend's function for the kind and size, the matrix offsets folded into the views,
/// so that a replay goes straight to the unrolled loops. Cholesky: a → b; its reverse rule:
/// l = a, lbar = b, abar = c; triangular solve: t = a on r, lower or upper.
enum class MatKind : uint8_t { cholesky, cholesky_vjp, tri_solve };
struct MatPlan {
  int64_t (*run)(const MatPlan& plan) = nullptr;  ///< 0 when the matrix failed, else -1
  MatView a, b, c;
  RhsView r;
  bool lower = true;
};
/// Sets plan.run when the backend has a resolved form for this kind and size (false: replay the call).
using MatPlanFn = bool (*)(MatKind kind, MatPlan& plan);

/// x_t = a_t x_{t-1} + b_t along one dimension of T steps (x_{-1} = 0), for `lanes` independent
/// lanes; lane l of operand o starts at offsets_o[l] and steps by step_o (0 = broadcast).
struct RecurrenceArgs {
  int64_t steps = 0, lanes = 0;
  const int64_t *off_a = nullptr, *off_b = nullptr, *off_x = nullptr;
  int64_t step_a = 0, step_b = 0, step_x = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* x = nullptr;
};
using RecurrenceFn = void (*)(const RecurrenceArgs& r);
/// Reverse rule: λ_t = g_t + a_{t+1} λ_{t+1}; db_t += λ_t; da_t += λ_t x_{t-1}. da/db may be null
/// (no gradient wanted) or have zero steps/offsets (broadcast: reduced on the fly). Serial.
struct RecurrenceVjpArgs {
  RecurrenceArgs fwd;  ///< a and x (x is the forward output)
  const int64_t *off_g = nullptr, *off_da = nullptr, *off_db = nullptr;
  int64_t step_g = 0, step_da = 0, step_db = 0;
  const void* g = nullptr;
  void* da = nullptr;
  void* db = nullptr;
};
using RecurrenceVjpFn = void (*)(const RecurrenceVjpArgs& r);

/// Tridiagonal systems A x = rhs along one dimension of n rows, for `systems` independent systems.
/// Row i of A holds lower[i] (column i-1), diag[i], upper[i] (column i+1); lower[0] and
/// upper[n-1] lie outside the matrix and are never read. Operand o of system s starts at
/// off[o][s] and steps by step[o] along the rows (0: the same value on every row).
/// Where each system of an operand starts (elements from its data pointer): table[s], or
/// base + s * stride when the systems are evenly spaced (table null: one batch axis, or axes that
/// collapse into one — nothing per system is built, uploaded or read).
struct SystemOffsets {
  const int64_t* table = nullptr;
  int64_t base = 0, stride = 0;
  int64_t operator[](int64_t s) const { return table ? table[s] : base + s * stride; }
  /// The offsets of systems first, first + 1, ...
  SystemOffsets operator+(int64_t first) const {
    return table ? SystemOffsets{table + first, 0, 0} : SystemOffsets{nullptr, base + first * stride, stride};
  }
};

struct TridiagonalArgs {
  enum Operand { lower, diag, upper, rhs, x, count };
  int64_t n = 0, systems = 0;
  const void* in[4] = {};  ///< lower, diag, upper, rhs
  void* out = nullptr;     ///< x (may alias nothing else)
  SystemOffsets off[count] = {};
  int64_t step[count] = {};
  bool pivoting = false;   ///< LU with partial pivoting (LAPACK gtsv); otherwise Thomas, no pivoting
  bool transpose = false;  ///< solve A^T x = rhs (the adjoint's solve)
  /// The reverse rule fused into the transposed solve: with `vjp`, the solution λ of
  /// A^T λ = rhs is not written to `out` (null) but accumulated, with the forward solution x, into
  /// the adjoints: rhs̄ += λ, diaḡ_i -= λ_i x_i, lower̄_i -= λ_i x_{i-1}, upper̄_i -= λ_i x_{i+1}.
  /// Every adjoint given has one element per system and row (no two systems share one), with one
  /// exception the CPU backend alone takes: where lower, diag and upper are shared by every
  /// system (no batch axis: off stride 0, no table), their adjoints are one row each (stride 0)
  /// and receive the sums over the systems.
  struct Adjoints {
    enum Slot { solution, adj_lower, adj_diag, adj_upper, adj_rhs, slots };
    const void* x = nullptr;  ///< the forward solution
    void* adj[4] = {};        ///< lower, diag, upper, rhs adjoints; null when not wanted
    /// Per adjoint: write it (its contents are uninitialised: a fresh adjoint) instead of adding.
    bool assign[4] = {};
    SystemOffsets off[slots] = {};
    int64_t step[slots] = {};
  };
  const Adjoints* vjp = nullptr;
};
/// Returns the first system whose solve failed (a zero or non-finite pivot) or -1.
using TridiagonalFn = int64_t (*)(const TridiagonalArgs& args);

/// Copies `bytes` between host and device memory (or two devices) of this backend and waits for
/// the copy; both pointers are contiguous buffers.
using TransferFn = void (*)(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);

/// A recorded device call offered to a fused chain (DeviceProgramFns::fuse): an elementwise kernel
/// on its loop, or (dot set) a contraction of dtype index `dtype`.
struct ChainCall {
  ElementwiseFn fn = nullptr;
  const LoopDims* dims = nullptr;
  const LoopArg* args = nullptr;
  const ContractArgs* dot = nullptr;
  int dtype = 0;
  /// An elementwise call whose operand `moving` points `stride` bytes further per unit of the
  /// replay's index (a scan's slice copy), args holding its address at index 0; -1: none.
  int moving = -1;
  int64_t stride = 0;
};

/// Device-side support for recorded programs (the CUDA table; null on the host).
struct DeviceProgramFns {
  /// Device memory on the device that owns `near`, holding a copy of `bytes` bytes from `host`.
  void* (*upload)(const void* host, std::size_t bytes, const void* near) = nullptr;
  void (*release)(void* device_ptr) = nullptr;
  /// Waits for the device's work and reads one word of device memory.
  unsigned long long (*read_word)(const void* device_ptr) = nullptr;
  /// Records what body(ctx) launches on the device owning `near` into an executable graph
  /// (nothing runs while recording); null when the device cannot record it.
  void* (*capture_graph)(void (*body)(void*), void* ctx, const void* near) = nullptr;
  /// Launches a graph; chains with moving operands recorded in it run at `index`.
  void (*launch_graph)(void* graph, int64_t index) = nullptr;
  void (*destroy_graph)(void* graph) = nullptr;
  /// Which fused chain `call` can join (calls of one key run in one kernel), or -1: too large, or
  /// a kernel with no chain form.
  int (*chain_key)(const ChainCall& call) = nullptr;
  /// One kernel that runs the first `*taken` of the `n` calls (one key) in order, each finished
  /// before the next starts: as many as fit one chain; null when fewer than two do, unless the
  /// first is a moving call (which makes a chain alone, of any size). Its launches run on the
  /// device owning `near`.
  void* (*fuse)(const ChainCall* calls, std::size_t n, std::size_t* taken, const void* near) = nullptr;
  void (*launch_fused)(void* chain, int64_t index) = nullptr;
  void (*destroy_fused)(void* chain) = nullptr;
};

/// Dtype indices of the kernel tables: 0 float64, 1 float32, and for the kernels defined on complex
/// numbers 2 complex128, 3 complex64 (numeric_index). Tables of real-only kernels have two entries.
inline constexpr int kNumeric = 4;

/// The kernels that take a complex number apart or build one: index 0 complex128 (float64 parts),
/// 1 complex64 (float32 parts). args[0] is the output.
struct ComplexKernels {
  ElementwiseFn make[2] = {};       ///< out complex = (re, im) from two real operands
  ElementwiseFn real[2] = {};       ///< out real = Re in
  ElementwiseFn imag[2] = {};       ///< out real = Im in
  ElementwiseFn conj[2] = {};       ///< out complex = conj(in)
  ElementwiseFn abs[2] = {};        ///< out real = |in|
  ElementwiseFn angle[2] = {};      ///< out real = atan2(Im in, Re in)
  ElementwiseFn from_real[2] = {};  ///< out complex = (in, 0) from the real dtype of its parts
  ElementwiseFn narrow = nullptr;   ///< out complex64 = in complex128
  ElementwiseFn widen = nullptr;    ///< out complex128 = in complex64
  /// The JVP forms of the derivative kernels (dst (+)= g * D, D not conjugated); deriv_acc and
  /// deriv_set hold the VJP forms (dst (+)= g * conj(D)) at indices 2 and 3.
  ElementwiseFn tangent_acc[static_cast<int>(DerivOp::count)][2] = {};
  ElementwiseFn tangent_set[static_cast<int>(DerivOp::count)][2] = {};
};

/// Kernels of one backend, by op and dtype index (0 = float64, 1 = float32, 2 = complex128,
/// 3 = complex64 where the table has four entries).
struct KernelTable {
  ElementwiseFn unary[static_cast<int>(UnaryOp::count)][kNumeric] = {};
  ElementwiseFn binary[static_cast<int>(BinaryOp::count)][kNumeric] = {};
  /// args: dst, g, p0, p1, p2 (unused p's may be null with zero strides).
  ElementwiseFn deriv_acc[static_cast<int>(DerivOp::count)][kNumeric] = {};
  /// The same rules writing dst = g * D (into a fresh adjoint covered one to one by the loop).
  ElementwiseFn deriv_set[static_cast<int>(DerivOp::count)][kNumeric] = {};
  ElementwiseFn compare[3][2] = {};  ///< out (bool), a, b
  ElementwiseFn where[kNumeric] = {};  ///< out, cond (bool), a, b
  ElementwiseFn copy[6] = {};        ///< out, in; by dtype index 0 f64, 1 f32, 2 i64, 3 bool, 4 c128, 5 c64
  ElementwiseFn acc[kNumeric] = {};  ///< out += in (serial where out has zero strides)
  ElementwiseFn max_acc[2] = {};     ///< out = max(out, in)
  ElementwiseFn scale[kNumeric] = {};  ///< out = in * scalar, scalar passed in args[2].data (double*)
  ElementwiseFn fill[kNumeric] = {};   ///< out = *(double*)args[1].data (a real value)
  ElementwiseFn cast_f64_f32 = nullptr;  ///< out float32 = in float64
  ElementwiseFn cast_f32_f64 = nullptr;  ///< out float64 = in float32
  ComplexKernels complex;
  ContractFn contract[kNumeric] = {};
  ContractPlanFn contract_plan[2] = {};  ///< optional (host: contractions of sizes <= 4)
  CholeskyFn cholesky[kNumeric] = {};  ///< complex: Hermitian (A = L L^H)
  CholeskyVjpFn cholesky_vjp[2] = {};
  TriSolveFn tri_solve[kNumeric] = {};
  MatPlanFn mat_plan[2] = {};  ///< optional (host: Cholesky and triangular solves of sizes <= 4)
  SolveFn solve[kNumeric] = {};
  LogdetFn logdet[2] = {};
  RecurrenceFn recurrence[kNumeric] = {};
  RecurrenceVjpFn recurrence_vjp[kNumeric] = {};
  TridiagonalFn tridiagonal[kNumeric] = {};
  TransferFn transfer = nullptr;  ///< the CUDA table's host <-> device copies
  DeviceProgramFns program;       ///< the CUDA table's support for recorded programs

  /// Flat and scalar twins of the elementwise kernels above (optional per kernel).
  static constexpr int kMaxFlat = 1024;
  struct FlatTwin {
    ElementwiseFn kernel = nullptr;
    FlatFn flat = nullptr;
    ScalarFn one = nullptr;
  };
  FlatTwin flat[kMaxFlat] = {};
  int n_flat = 0;
  /// Sets `entry` to `kernel` and records its twins.
  void set(ElementwiseFn& entry, ElementwiseFn kernel, FlatFn twin, ScalarFn one = nullptr) {
    entry = kernel;
    if (n_flat < kMaxFlat) flat[n_flat++] = {kernel, twin, one};
  }
};

/// Device kernels that wait for the device (a device-to-host copy, e.g. of a failure flag) call
/// this: inside a replayed scan step or a map chunk (where it costs a round trip every time) it
/// warns once per op on stderr, naming the op and the device. Defined in core/ops/kernel_program.cpp.
void note_device_wait(const char* op, int device);

/// Fills `t` with the host kernels (backends/cpu).
void register_cpu_kernels(KernelTable& t);
// The CUDA backend's entry points. libtenax holds weak no-op definitions (backends/cuda/no_cuda.cpp);
// the CUDA objects (the installed package's tenax::cuda, linked into a program as objects) hold the
// real ones, which the linker prefers. A CPU program thus links no CUDA library at all.

/// Whether the CUDA backend's objects are linked into this program.
bool cuda_backend_linked();
/// Why no CUDA device may be there, for error messages: "K CUDA devices visible", or that the
/// CUDA backend is not linked into this program and how to link it (core/storage.cpp).
std::string cuda_visibility();
/// Fills `t` with the CUDA kernels; a no-op without the CUDA backend.
void register_cuda_kernels(KernelTable& t);
/// Number of usable CUDA devices (0 without a driver, a device or the CUDA backend).
int cuda_device_count();
/// CUDA kernel launches made so far (every device; a cuSPARSE solve counts as one): what the
/// benchmarks divide by steps for "launches per step". 0 without the CUDA backend.
int64_t cuda_kernel_launches();
/// Kernels (and copies, library calls) run on CUDA devices so far: a graph launch counts its nodes,
/// a fused chain one. "Kernels per step" in the benchmarks. 0 without the CUDA backend.
int64_t cuda_kernels_run();
/// The default allocator of CUDA device `index` (stream-ordered pool), or null without the CUDA
/// backend or that device. storage.cpp installs it on first use of the device.
Allocator* default_cuda_allocator(int index);
/// Bytes the default memory pool of CUDA device `index` holds from the driver (in use or kept for
/// reuse: cudaMemPoolAttrReservedMemCurrent); 0 without the CUDA backend.
int64_t cuda_pool_reserved_bytes(int index);

}  // namespace tenax::detail
