#pragma once
// scan: a loop over a named axis whose body is traced once into a plan and replayed per step;
// differentiable in reverse mode with parameters' adjoints accumulated into one buffer each.
#include <functional>
#include <utility>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

/// A scan body: (carry, x_t) -> (new carry, y_t). Carries keep their axes, sizes and dtype from
/// step to step. The body runs only while it is traced (steps 0 and 1, again for each block of a
/// scan run in blocks): it must compute with tenax ops only (branch with where(), not with C++
/// `if` on values) and run the same ops every step; tensors it closes over are read, never
/// copied per step.
using ScanBody = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(
    const std::vector<Tensor>& carry, const std::vector<Tensor>& x)>;

struct ScanOptions {
  /// Walk the axis from its last index to its first. ys stay aligned with xs: the output of the
  /// step that read position t of `over` is stored at position t (as jax.lax.scan's reverse).
  bool reverse = false;
  /// Reverse mode stores the carry every k steps and recomputes the steps in between:
  /// memory O(T/k + k) carries, one extra forward pass at most. 1 stores every carry.
  int64_t checkpoint_every = 1;
  /// When > 0, reverse mode keeps at most this many bytes of stored carries and picks the
  /// schedule itself: every carry when they fit, else recursive bisection (binomial
  /// checkpointing, O(T log T) recomputation) with at most budget / carry-bytes snapshots. A budget
  /// below (log2 T + 1) carries is a MemoryError. Overrides checkpoint_every.
  int64_t memory_budget = 0;
  /// With every carry stored (checkpoint_every = 1, or a memory_budget they fit), the forward pass
  /// on the host also keeps the intermediate values of as many steps as fit what is left of the
  /// recording tape's residual budget (Tape::set_residual_budget: shared by all scans of a tape,
  /// kDefaultResidualBudget by default), and the reverse pass reads them instead of recomputing
  /// those steps.
  /// -1 (default): the tape's budget alone; >= 0: at most this many bytes for this scan too (with
  /// a memory_budget: what it leaves after the carries); 0: always recompute (carries only).
  int64_t residual_budget = -1;
  /// Number of steps when `xs` is empty (otherwise the size of `over`, and must agree).
  int64_t length = -1;
};

struct ScanResult {
  std::vector<Tensor> carry;  ///< the final carry
  /// The per-step outputs stacked along `over` (outermost axis). An output that is also the new
  /// carry (a state returned every step) is a view into a buffer the reverse pass reads its
  /// checkpoints from (forward scans on the host): do not write into it before the gradient.
  std::vector<Tensor> ys;
};

/// Runs body over the axis `over` of every tensor of `xs` (through strided views: any axis,
/// no transpose), starting from `init`. Where `over` is not the outer axis of large xs, a step
/// local along their next axis runs over cache-sized blocks of it, and others read their slices
/// through staged blocks of steps (docs/decisions.md, "A scan over an inner axis runs in blocks").
ScanResult scan(const ScanBody& body, const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                const ScanOptions& options = {});

}  // namespace tenax
