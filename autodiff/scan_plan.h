#pragma once
// Library-internal: a scan body traced once into a plan (the op calls, their wiring and the
// constants they read) that is replayed per step, forwards and, for reverse mode, backwards.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {

/// What a scan body computes from (carry, x_t): (new carry, y_t).
using ScanStepFn = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(
    const std::vector<Tensor>& carry, const std::vector<Tensor>& x)>;

/// The state of a variable's adjoint during a captured reverse pass (ScanPlan::backward's `fresh`):
/// written (or never allocated), allocated but not written yet (zero), or lent — another
/// variable's adjoint taken whole (VjpContext::lend_adjoint), read only, copied into a buffer of
/// its own if a contribution is added later.
enum AdjointState : char { kWritten = 0, kFresh = 1, kLent = 2 };

/// Where a plan reads a value: a plan variable (var >= 0) or a constant captured at trace time.
struct PlanRef {
  int32_t var = -1;
  int32_t konst = -1;
};

/// One op call of the body.
struct PlanOp {
  const OpDef* op;
  int32_t attrs;        ///< into ScanPlan::attrs
  int32_t first_input;  ///< into ScanPlan::inputs
  int32_t n_inputs;
  int32_t out;  ///< variable
};

/// The variables of a plan: carries first, then the per-step inputs, then closed-over parameters
/// (tensors an enclosing tape tracks), then op outputs in order.
enum class VarKind : uint8_t { carry, x, param, op };

struct PlanVar {
  VarKind kind;
  int32_t index;  ///< carry / x / param number, or the creating op
  Axes axes;
  DType dtype;
};

/// The traced plan of one scan body. Immutable once traced; shared by the forward and reverse passes.
class ScanPlan {
 public:
  /// Runs `body` once on (carry, x) recording its op calls. `outer` is the serial of the tape the
  /// scan records on (0 if none): tensors it tracks become parameters. Returns the step's results.
  /// `what` names what is traced in errors (e.g. "scan body"; it must outlive the trace);
  /// `fallback`: the caller can run the body op by op instead (RecordState::fallback).
  static std::shared_ptr<ScanPlan> trace(const ScanStepFn& body, const std::vector<Tensor>& carry,
                                         const std::vector<Tensor>& x, uint32_t outer,
                                         std::vector<Tensor>& carry_out, std::vector<Tensor>& y_out,
                                         const char* what = "scan body", bool fallback = false);

  /// Empty when both plans run the same op calls on the same wiring; else what differs.
  [[nodiscard]] std::string difference(const ScanPlan& other) const;
  /// Whether a program captured from `other` computes what this plan computes: the same op calls
  /// with the same attributes and wiring, the same variables, and constants of equal values (host
  /// constants only). Stricter than an empty difference().
  [[nodiscard]] bool same_as(const ScanPlan& other) const;

  /// One step forwards: values[var] for carries and x (and parameters) must be set; fills op outputs.
  void forward(std::vector<Tensor>& values) const;
  /// The value of a reference after forward().
  [[nodiscard]] const Tensor& value(const std::vector<Tensor>& values, PlanRef r) const {
    return r.var >= 0 ? values[static_cast<size_t>(r.var)] : consts_[static_cast<size_t>(r.konst)];
  }

  /// Which variables can carry a gradient given which per-step inputs do (x_needs[k]).
  [[nodiscard]] std::vector<char> needs_grad(const std::vector<char>& x_needs) const;

  /// One step backwards over the values of forward(). `adjoints` holds, on entry, the seeded
  /// adjoints (and the parameters' accumulators, the x adjoints as views of the xs adjoint); other
  /// entries undefined. Each VJP accumulates into its inputs' adjoints, allocated lazily.
  /// `batch`: axes the adjoints have beyond their variables' (several VJPs at once).
  /// `fresh` (optional, per variable, AdjointState): adjoints allocated but not yet written (see
  /// allocate); a rule writing one whole clears its flag, one accumulating zeroes it first, and an
  /// op whose output adjoint is still fresh contributes nothing and is skipped. With `fresh`, add's
  /// and sub's rules lend their cotangent as an intermediate's adjoint (no copy).
  void backward(const std::vector<Tensor>& values, std::vector<Tensor>& adjoints,
                const std::vector<char>& needs, const Axes& batch, std::vector<char>* fresh = nullptr) const;

  /// Forward mode over the values of forward(): `tangents` holds, on entry, the tangents of some
  /// variables (with `batch` axes beyond theirs; others undefined: zero); each op with a tangent
  /// input gets its output's tangent from its JVP rule. The rules read every op's inputs and
  /// output, so the values must all be written (no copy forwarding in the forward replay).
  void forward_tangent(const std::vector<Tensor>& values, std::vector<Tensor>& tangents, const Axes& batch) const;

  /// The adjoint of variable v (its axes, then `batch`), allocated zeroed (or as a view of its
  /// parent's) on first use. With `fresh`: an adjoint flagged fresh (or the fresh parent of a
  /// view) is zero-filled now and unflagged, so that it can be accumulated into; a lent one is
  /// copied into a buffer of its own.
  Tensor& adjoint(const std::vector<Tensor>& values, std::vector<Tensor>& adjoints, int32_t v,
                  const Axes& batch, std::vector<char>* fresh = nullptr) const;
  /// A new buffer for v's adjoint (its axes, then `batch`), zeroed or uninitialised.
  [[nodiscard]] Tensor adjoint_buffer(const std::vector<Tensor>& values, int32_t v, const Axes& batch,
                                      bool zeroed) const;
  /// Allocates v's adjoint without initialising it and flags it fresh (a view: its parent's,
  /// allocated so, viewed).
  void allocate(const std::vector<Tensor>& values, std::vector<Tensor>& adjoints, int32_t v,
                const Axes& batch, std::vector<char>& fresh) const;

  [[nodiscard]] const PlanVar& var(int32_t v) const { return vars_[static_cast<size_t>(v)]; }
  /// The variable v is a view of (its adjoint aliases that one's), or -1.
  [[nodiscard]] int32_t view_parent(int32_t v) const;
  /// Whether some view op reads v (its adjoint is then a view of v's).
  [[nodiscard]] bool viewed(int32_t v) const { return viewed_[static_cast<size_t>(v)] != 0; }
  [[nodiscard]] int n_carry() const { return n_carry_; }
  [[nodiscard]] int n_x() const { return n_x_; }
  [[nodiscard]] const std::vector<Tensor>& params() const { return params_; }
  [[nodiscard]] int32_t param_var(size_t k) const { return param_vars_[k]; }
  [[nodiscard]] size_t n_vars() const { return vars_.size(); }
  [[nodiscard]] const std::vector<PlanRef>& carry_out() const { return carry_out_; }
  [[nodiscard]] const std::vector<PlanRef>& y_out() const { return y_out_; }
  /// The sharding (core/distributed.h) of each carry and output as traced (0: whole).
  [[nodiscard]] const std::vector<uint16_t>& carry_shards() const { return carry_shards_; }
  [[nodiscard]] const std::vector<uint16_t>& y_shards() const { return y_shards_; }
  [[nodiscard]] const std::vector<PlanOp>& ops() const { return ops_; }
  /// Where op `p` reads its input i.
  [[nodiscard]] PlanRef input(const PlanOp& p, int i) const {
    return inputs_[static_cast<size_t>(p.first_input + i)];
  }
  /// Whether the step treats `axis` elementwise: every op keeps it where an input has it (no
  /// reduction, contraction, slice, shift or new axis of that name: OpDef::shard local or layout,
  /// its attributes not naming it), no constant or parameter has it, and every carry and output
  /// has it. Then the scan over independent blocks of `axis` computes what it does over the whole.
  [[nodiscard]] bool local_along(Name axis) const;
  /// Per variable: whether anything but the forward step reads its value — a carry, input or
  /// parameter, a new carry or output, or what a reverse rule saves (OpDef::saves). With
  /// `by_reverse_step`: what the step's own reverse step reads (not the new carries and outputs,
  /// which the next step and the stacked outputs read, unless a rule saves them).
  [[nodiscard]] std::vector<char> read_after_step(bool by_reverse_step = false) const;
  /// Per carry: whether the reverse pass needs its value — some value a reverse rule reads
  /// (OpDef::saves) depends on it, or the new value of a carry it needs does. A carry it does not
  /// need (an accumulated loss: loss + f(...)) needs no checkpoints: a recomputed step may read
  /// any value of it.
  [[nodiscard]] std::vector<char> carries_needed_backward() const;

 private:
  friend class PlanRecorder;
  int n_carry_ = 0, n_x_ = 0;
  std::vector<PlanVar> vars_;
  std::vector<char> viewed_;  ///< per variable: read by a view op
  std::vector<PlanOp> ops_;
  std::vector<PlanRef> inputs_;
  std::vector<Attrs> attrs_;
  std::vector<Tensor> consts_;
  std::vector<Tensor> params_;        ///< the closed-over tracked tensors (their values are fixed)
  std::vector<int32_t> param_vars_;   ///< their variables
  std::vector<PlanRef> carry_out_, y_out_;
  std::vector<uint16_t> carry_shards_, y_shards_;
};

}  // namespace tenax::detail
