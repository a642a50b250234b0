#pragma once
// The tape: define-by-run recording of op calls on this thread, and the reverse sweep over it.
#include <cstdint>
#include <memory>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

namespace detail {
class TapeImpl;
}

/// Figures of one tape, for memory accounting and benchmarks.
struct TapeStats {
  int64_t records = 0;           ///< op calls recorded
  int64_t variables = 0;         ///< tracked tensors (watched inputs and op outputs)
  int64_t residual_bytes = 0;    ///< bytes of tensors the records keep for the reverse pass
  int64_t adjoint_buffers = 0;   ///< adjoint buffers allocated by the last sweep (views share)
  int64_t adjoint_bytes = 0;     ///< their bytes
  /// Of those, adjoints the last sweep zeroed only in the slices a select took (a large tensor's,
  /// the stacked outputs of a scan whose final state is the result, say): no rule read them whole.
  int64_t partial_adjoints = 0;
  /// Of the records, small elementwise calls kept by value: their residuals' elements copied, their
  /// reverse rules run on pointers (docs/decisions.md "Records by value").
  int64_t records_by_value = 0;
};

/// The default of Tape::set_residual_budget: 48 MiB for all scans of one tape (seed 002's
/// two-layer LSTM then peaks at 1.48x the hand-counted minimum of its reverse pass, at a median
/// 1.04x the time with every step kept: bench/RESULTS.md).
inline constexpr int64_t kDefaultResidualBudget = int64_t{48} << 20;

/// Records every op whose input is watched (directly or through other ops) while it is the
/// innermost live Tape of this thread. Tapes may be destroyed in any order: when one ends, the
/// tapes created after it and still alive go on recording as before, and the tensors it tracked
/// become constants (using one where its tape is needed, as `wrt` of another tape's gradient, is an
/// AutodiffError). A tape is destroyed on the thread that created it. Tapes are per thread and not shared: calling watch /
/// gradient / forward_tangent from another thread, or using a tensor a live tape of another thread
/// tracks in an op, raises AutodiffError. A tensor tracked by an enclosing or finished tape is a
/// constant here (no higher-order derivatives through nesting yet).
class Tape {
 public:
  /// Starts recording on this thread.
  Tape();
  /// Stops recording; restores the enclosing tape, if any.
  ~Tape();
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  /// A tracked alias of `t` (same buffer, no copy); ops on it are recorded.
  [[nodiscard]] Tensor watch(const Tensor& t);
  /// Reverse sweep from `output` seeded with `cotangent` (default: 1 for a one-element output).
  /// Returns the adjoint of each of `wrt` (zeros when it does not influence `output`).
  /// A cotangent with axes beyond the output's computes one VJP per index of those batch axes in
  /// the same sweep (the adjoints get the batch axes after their own); ops whose VJP rule cannot
  /// take batch axes (the linear algebra ops, map) raise AutodiffError naming the op.
  [[nodiscard]] std::vector<Tensor> gradient(const Tensor& output, const std::vector<Tensor>& wrt,
                                             const Tensor& cotangent = Tensor());
  /// Forward sweep: tangents of `output` given tangents of watched `inputs` (zeros where absent).
  /// Tangents may carry axes beyond their primals' (the same batch axes on every tangent given):
  /// one JVP per index of those axes in the same sweep, the result getting them after the
  /// output's; ops whose JVP rule cannot take batch axes (and scan/map nodes) raise AutodiffError.
  [[nodiscard]] Tensor forward_tangent(const Tensor& output, const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& tangents);
  /// Makes the tape keep every input and output (what forward_tangent needs). Call before recording.
  void keep_all_residuals();
  /// The bytes of steps' intermediates that all scans recorded on this tape together may keep for
  /// the reverse pass, which then reads them instead of recomputing the steps (ScanOptions::
  /// residual_budget; default kDefaultResidualBudget). A scan keeps as many of its steps' as
  /// what is left holds, in the order the scans run, and recomputes the others; 0 recomputes
  /// every step. Call before recording.
  void set_residual_budget(int64_t bytes);
  /// Current figures.
  [[nodiscard]] TapeStats stats() const;
  /// Bytes held by the tape: records, variable table and residuals.
  [[nodiscard]] int64_t bytes() const;

 private:
  friend class detail::TapeImpl;
  std::unique_ptr<detail::TapeImpl> impl_;
  uint32_t owner_;  ///< token of the thread that created it (detail::thread_token)
};

}  // namespace tenax
