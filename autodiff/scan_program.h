#pragma once
// Library-internal: a scan plan compiled to kernel programs on fixed buffers. The first step run
// through a StepProgram captures the kernel calls the plan's ops make (core/ops/capture.h); later
// steps replay them with no dispatch. Carries, per-step inputs and their adjoints live in fixed
// buffers; slice copies move x_t, y_t and their adjoints between those buffers and the stacked
// tensors, so no captured call points at memory that moves from step to step — except, on the
// host, the calls that read a large x_t, or a carry that is also an output, in place: their
// operand is recomputed per step from a base the program owns (read_x_in_place,
// read_carries_from; KernelProgram::read_in_place).
#include <memory>
#include <vector>

#include "tenax/autodiff/scan_plan.h"
#include "tenax/autodiff/slice_copy.h"
#include "tenax/core/ops/capture.h"

namespace tenax::detail {

/// The bytes a tensor's elements take.
inline int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(itemsize(t.dtype())); }

/// `axes`, then the batch axes of a pass (several VJPs or JVPs at once).
inline Axes with_batch(Axes axes, const Axes& batch) {
  for (int i = 0; i < batch.rank(); ++i) axes.push_back(batch[i]);
  return axes;
}

/// Whether a's first element lies in one of `buffers`.
bool aliases(const Tensor& a, const std::vector<Tensor>& buffers);

/// dst[k] = src[k] for each defined dst[k] (an undefined src[k]: zeros), where a source may be (a
/// view of) one of `read` — the destinations, and buffers read but not written — : those are
/// copied out first, so that no destination is overwritten before it is read. A source that is its
/// destination, laid out alike, is left as it is. Under a kernel capture the copies are captured.
void hand_on(const std::vector<Tensor>& dst, std::vector<Tensor> src, const std::vector<Tensor>& read);

/// allow_copy_forwarding's arguments from per-variable tensors: the buffers of those flagged
/// shared (read or written outside the program too) as storages, the others' as pointers (its own).
struct BufferSplit {
  std::vector<const void*> owned;
  std::vector<StoragePtr> shared;
};
BufferSplit split_buffers(const std::vector<Tensor>& tensors, const std::vector<char>& shared);

/// One scan's compiled step: forward (and, once prepared, backward) kernel programs over the
/// plan's fixed buffers.
class StepProgram {
 public:
  /// `xs` are the scanned tensors, walked along `over` (from the end when `reverse`); the carry
  /// buffers are made like `carry` (axes order of the traced carries, device, dtype).
  /// `reusable`: the program is kept for later calls of the same scan (ScanCache): it reads the
  /// parameters from copies of its own (rebind() refills them) and accumulates their adjoints
  /// into buffers of its own (add_param_adjoints() hands them out), so that no captured call
  /// points at a tensor of one call.
  StepProgram(std::shared_ptr<const ScanPlan> plan, const std::vector<Tensor>& carry,
              const std::vector<Tensor>& xs, Name over, bool reverse, int64_t steps, bool reusable = false);

  /// A reusable program, for another call of its scan: the scanned tensors `xs` (the axes, dtype
  /// and steps of the first call's) and the parameters' values (in the plan's order). The built
  /// programs stay.
  void rebind(const std::vector<Tensor>& xs, const std::vector<Tensor>& params);
  /// A reusable program, after a reverse pass: adds the parameters' adjoints to `param_adj`
  /// (undefined entries: not wanted).
  void add_param_adjoints(const std::vector<Tensor>& param_adj) const;

  /// The carry buffers: the carry into the step run next (except those read in place:
  /// read_carries_from, load_carries). Write into them, never rebind them.
  [[nodiscard]] const std::vector<Tensor>& carry() const { return carry_; }
  /// Host, forward scans; before the first forward() of a call: `slots[k]`, when defined, holds
  /// carry k before every step along `axis` (steps + 1 slots: the initial carry and each step's
  /// new carry, which the caller stores there — an output's buffer, autodiff/scan.cpp
  /// shared_checkpoints). Where the forward program's calls that read carry k can read slot s
  /// instead of the carry buffer (KernelProgram::read_in_place), they do, and next_carry() no
  /// longer copies carry k into its buffer. Undefined: the carry buffer, as before.
  void read_carries_from(const std::vector<Tensor>& slots, Name axis);
  /// A reusable program between calls: lets go of what it holds of the call that ends — its
  /// scanned inputs, output slots, cotangents and adjoints (a program kept for later calls must
  /// not keep one call's tensors alive) and the steps' kept intermediates (a kept program holds
  /// one step's buffers, not all steps'); the next call's rebind(), read_carries_from(),
  /// keep_residuals() and prepare_backward() give new ones.
  void release_call();
  /// Whether carry k is read in place (read_carries_from) in this call.
  [[nodiscard]] bool carry_in_place(size_t k) const { return carry_in_place_[k] != 0; }
  /// Loads the buffers of the carries read in place from slot s.
  void load_carries(int64_t s);
  /// Loads the carry buffers from tensors with the carries' axes.
  void set_carry(const std::vector<Tensor>& carry);

  /// Runs step s forwards from the carry buffers (their values are kept).
  void forward(int64_t s);
  /// Moves the carry buffers to the carry after the step last run forwards.
  void next_carry();
  /// Appends to `loop` what forward(s) runs (x_t loads, the step's calls), what next_carry() runs,
  /// or what backward(s) runs: false when something is not a single-element host call, or the
  /// program is not built yet (it is built by the first forward / next_carry / backward call).
  /// append_next declares the carries live after the loop, append_backward the carries'
  /// cotangents and the parameters' adjoints (ScalarLoop::live_out).
  bool append_forward(ScalarLoop& loop) const;
  bool append_next(ScalarLoop& loop) const;
  bool append_backward(ScalarLoop& loop) const;
  /// On a device: appends what forward(s), next_carry() or backward(s) replays (the slice copies
  /// included) to a program whose replay index is the step, so that a sweep runs one program (one
  /// graph) per step; false on the host or while not built. `program` must not outlive this.
  bool append_forward(KernelProgram& program) const;
  bool append_next(KernelProgram& program) const;
  bool append_backward(KernelProgram& program) const;
  [[nodiscard]] bool on_host() const {
    return carry_.empty() || carry_[0].device().kind == Device::Kind::cpu;
  }
  /// Whether the programs the append_ functions need are built (forward, next carry, and with
  /// `backward` the reverse step of the current reverse pass).
  [[nodiscard]] bool built(bool backward) const {
    return forward_built_ && next_built_ && (!backward || backward_built_);
  }
  /// Slice index origin and direction of the step: index(s) = origin + dir * s.
  [[nodiscard]] int64_t origin() const { return reverse_ ? steps_ - 1 : 0; }
  [[nodiscard]] int64_t dir() const { return reverse_ ? -1 : 1; }
  /// Output k of the step last run forwards.
  [[nodiscard]] const Tensor& y(size_t k) const { return plan_->value(values_, plan_->y_out()[k]); }

  /// Sets up the reverse pass: `needs` from ScanPlan::needs_grad; `param_adj` the parameters'
  /// accumulators (undefined: no gradient wanted); ys_bar / xs_adj the stacked cotangents of the
  /// outputs and adjoints of the inputs (undefined: zero / not wanted); `carry_bar` the cotangent
  /// of the final carry (undefined: zero). `batch`: axes the cotangents and adjoints have beyond
  /// their values' (several VJPs in one pass).
  void prepare_backward(const std::vector<char>& needs, const std::vector<Tensor>& param_adj,
                        const std::vector<Tensor>& ys_bar, const std::vector<Tensor>& xs_adj,
                        const std::vector<Tensor>& carry_bar, const Axes& batch);
  /// On the host, once forward() has built the forward program: keeps the intermediates its
  /// reverse step reads (their buffers in the arena; the carries come from the checkpoints and
  /// x_t is loaded again) of the steps from `from` on (save), as many as take at most `budget` bytes;
  /// false (nothing kept) when not one step fits, or on a device.
  bool keep_residuals(int64_t budget, int64_t from);
  /// Whether step s is one keep_residuals chose for this pass (save it after forward(s)).
  [[nodiscard]] bool keeps(int64_t s) const { return s >= residual_from_ && s < residual_from_ + residual_steps_; }
  /// Bytes kept for them (0 when keep_residuals said no).
  [[nodiscard]] int64_t residual_bytes() const { return residuals_.defined() ? residuals_.numel() : 0; }
  /// Keeps step s's intermediates, right after forward(s) and before next_carry() (only for a
  /// step keeps(s) names).
  void save(int64_t s);
  /// Instead of running forward(s) before backward(s) (the carries loaded from the checkpoints
  /// either way): puts what save(s) kept back; false when keeps(s) does not name s.
  bool restore(int64_t s);
  /// Runs step s backwards, right after forward(s): reads and replaces the carry cotangent.
  void backward(int64_t s);
  /// Where each output's stacked cotangent can be nonzero, as slice indices [lo, hi) along the
  /// scanned axis (hi < 0: all of it; empty: all of every one). Host steps seed an output's
  /// adjoint only inside its range (zeroing it outside where the seed writes it whole); the
  /// cotangent is never read outside. Set after prepare_backward, for one pass.
  void set_y_ranges(std::vector<std::pair<int64_t, int64_t>> ranges) { y_ranges_ = std::move(ranges); }
  /// Raises what device replays deferred (KernelProgram::finish): call when a sweep ends.
  void finish() const;
  /// Writes the inputs' adjoints still held in stages (SliceCopy::flush): call when a reverse
  /// sweep ends.
  void flush_stores();
  /// The cotangent of the carry into the step last run backwards.
  [[nodiscard]] const std::vector<Tensor>& carry_bar() const { return carry_bar_; }
  /// Fused loops of this program simplified before (in this call or, for a reused program, an
  /// earlier one), for ScalarLoop::simplify_as; at most kSimplifiedLoops are kept.
  [[nodiscard]] const std::vector<ScalarLoop>& simplified_loops() const { return simplified_; }
  void remember_simplified(const ScalarLoop& loop) {
    if (simplified_.size() < kSimplifiedLoops) simplified_.push_back(loop);
  }
  static constexpr size_t kSimplifiedLoops = 8;
  /// A reusable program's fused loops, kept from one call to the next so that a later call does
  /// not build them again: keep_loop files `loop` under `role` (a sweep of ScanRun's) with the
  /// call's `stacked` tensors its moving operands point into (`backward`: it replays the reverse
  /// programs too); take_loop gives it back to a later call whose stacked tensors are laid out
  /// alike (defined alike, the same dtypes, strides, offsets, storage sizes and sharing of
  /// storages), rebased onto them (ScalarLoop::rebase), as long as the programs it replays are
  /// the ones it was built from; null otherwise (the call builds its own). Nothing of the call is
  /// held. keep_loop on a program that is not reusable drops the loop.
  std::unique_ptr<ScalarLoop> take_loop(int role, const std::vector<Tensor>& stacked);
  void keep_loop(int role, const std::vector<Tensor>& stacked, std::unique_ptr<ScalarLoop> loop, bool backward);
  /// Appends the stacked tensors the loops of append_forward (x_t's) and, with `backward`, of
  /// append_backward (the outputs' cotangents, the inputs' adjoints) point into: the `stacked`
  /// of keep_loop and take_loop.
  void add_stacked(std::vector<Tensor>& out, bool backward) const;
  /// Slice copies between the carry buffers and a call's tensors, kept for the next call of a
  /// reusable program: keep_copies files them under `role`, released (SliceCopy::release: no
  /// tensor of the call is held), take_copies hands them back (empty: none, or not reusable), for
  /// the caller to rebind; keep_copies on a program that is not reusable drops them.
  void keep_copies(int role, std::vector<SliceCopy> copies);
  std::vector<SliceCopy> take_copies(int role);
  /// Loops take_loop gave back so far (for tests).
  [[nodiscard]] int64_t loops_reused() const { return loops_reused_; }

 private:
  [[nodiscard]] int64_t index(int64_t s) const { return reverse_ ? steps_ - 1 - s : s; }
  /// forward(s) the first time: runs step s capturing the forward program.
  void build_forward(int64_t s);
  /// backward(s) once built: loads what the reverse programs read, runs them.
  void replay_backward(int64_t s);
  /// backward(s) the first time: captures the seed and reverse programs while running step s.
  void build_backward(int64_t s);
  std::vector<char> alias_carry_adjoints();
  void capture_seed(std::vector<char>& fresh, const std::vector<char>& aliased);
  void plan_slice_copies(std::vector<char>& fresh);
  void capture_vjp(int64_t s, std::vector<char>& fresh);
  void allow_forwarding_back();
  /// Host, once the forward program is captured: the inputs x_t that only its loop calls read
  /// are read in place, from the scanned tensor (x_in_place_).
  void read_x_in_place();
  /// Host, once the reverse programs are captured: they read the inputs x_t read in place in the
  /// forward program in place too, or x_t is loaded before them (x_load_back_).
  void read_x_in_place_back();
  /// Host, once the forward program is captured (or read_carries_from on a built one): redirects
  /// or repoints the forward program's reads of the carries given slots.
  void read_carries_in_place();
  /// Input k's fixed buffer (x_t).
  [[nodiscard]] const Tensor& x_buffer(size_t k) const {
    return values_[static_cast<size_t>(plan_->n_carry()) + k];
  }
  /// Whether a new carry or an output (read by copies outside the programs) lies in `buf`.
  [[nodiscard]] bool read_outside(const Tensor& buf) const;
  /// Tells the arena which of its buffers save and restore copy (keep_residuals, once).
  void keep_read_buffers();

  std::shared_ptr<const ScanPlan> plan_;
  std::vector<ScalarLoop> simplified_;
  // How a stacked tensor lay when a loop was kept (keep_loop): its storage's first byte (null:
  // undefined) and size, its view, and the earlier stacked tensor sharing its storage (or -1).
  struct StackedLayout {
    const char* base = nullptr;
    std::size_t bytes = 0;
    int64_t offset = 0;
    int rank = 0;
    int64_t strides[kMaxRank] = {};
    DType dtype = DType::f64;
    int shares = -1;
  };
  struct KeptLoop {
    int role = 0;
    bool backward = false;
    int64_t forward_gen = 0, backward_gen = 0;
    std::vector<StackedLayout> stacked;
    std::unique_ptr<ScalarLoop> loop;  // null while a call holds it
  };
  std::vector<KeptLoop> kept_;
  std::vector<ScalarLoop::Moved> moved_;  // take_loop's, kept for its capacity
  std::vector<std::vector<SliceCopy>> kept_copies_;  // by role (keep_copies)
  // Bumped whenever the forward programs (forward, next carry) or the reverse ones (seed, VJP,
  // their adjoint buffers) are built again or change what they read: a kept loop replays them.
  int64_t forward_gen_ = 0, backward_gen_ = 0;
  int64_t loops_reused_ = 0;
  // The carries, x_t and the forward program's intermediates lie in here (host); first, so that
  // it goes last.
  std::unique_ptr<HostArena> arena_;
  bool arena_kept_ = false;  // keep_read_buffers() done
  Tensor residuals_;         // (kept step, kept arena bytes) once keep_residuals said yes
  int64_t residual_from_ = 0, residual_steps_ = 0;  // the kept steps: [from, from + steps)
  Name over_;
  bool reverse_;
  int64_t steps_;
  std::vector<Tensor> values_, carry_;
  std::vector<SliceCopy> x_load_;
  // Host: per input, where its calls read x_t when it is read in place (read_x_in_place); whether
  // it is (then no step loads it into its buffer before the forward program); whether it was
  // when keep_residuals chose what to keep (then its buffer is not kept); and whether the
  // reverse step loads it (a reverse program that reads the buffer, or one not kept).
  std::vector<std::unique_ptr<KernelProgram::MovingBase>> x_base_;
  std::vector<char> x_in_place_, x_unkept_, x_load_back_;
  // The same for carries read from slots (read_carries_from): the slots, their copies into the
  // carry buffers, where the calls read them, whether the forward program's reads were redirected
  // (once, for good: then the base points at the slots or, where a call gives none, at the buffer),
  // whether they read slots in this call, and as for x_t.
  std::vector<Tensor> carry_slots_;
  std::vector<SliceCopy> carry_load_;
  std::vector<std::unique_ptr<KernelProgram::MovingBase>> carry_base_;
  std::vector<char> carry_moved_, carry_in_place_, carry_load_back_;
  KernelProgram forward_, next_;
  bool forward_built_ = false, next_built_ = false;

  std::vector<char> needs_;
  Axes batch_;
  std::vector<Tensor> adjoints_, carry_bar_;
  std::vector<Tensor> ys_bar_, xs_adj_;
  std::vector<SliceCopy> y_seed_, x_adj_store_;
  std::vector<size_t> y_seed_output_;  // per y_seed_ copy: its output
  std::vector<std::pair<int64_t, int64_t>> y_ranges_;
  void seed_outputs(int64_t s);
  KernelProgram seed_, vjp_;
  bool backward_built_ = false;
  // A reusable program: which cotangents and input adjoints its reverse programs were built for
  // (with needs_ and batch_: prepare_backward rebuilds them when a pass asks for something else),
  // and how its slice copies were made (per output: the adjoint variable it seeds, -1: none, and
  // whether it adds; per input: its adjoint variable).
  bool reusable_ = false;
  std::vector<char> built_ys_, built_xs_;
  std::vector<std::pair<int32_t, bool>> y_seed_of_;
  std::vector<int32_t> x_adj_of_;
  void make_slice_copies();
  /// make_slice_copies() by rebinding the last call's copies (SliceCopy::rebind); false when one
  /// of this pass's tensors is laid out otherwise (then they are made again).
  bool rebind_slice_copies();
};

}  // namespace tenax::detail
