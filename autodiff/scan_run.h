#pragma once
// Library-internal: what one scan call keeps for its reverse pass (ScanRun, the custom node it
// records on the enclosing tape) and what a ScanCache keeps between calls. scan.cpp runs the
// forward loop and fills them; scan_run.cpp runs the reverse pass.
#include <memory>
#include <tuple>
#include <vector>

#include "tenax/autodiff/scan.h"
#include "tenax/autodiff/scan_cache.h"
#include "tenax/autodiff/scan_plan.h"
#include "tenax/autodiff/scan_program.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {

/// The axis of a scan's checkpoint buffers (one slot per stored carry).
extern const Name kCheckpointAxis;

/// The checkpoint slot copies a reusable step program keeps between calls (ScanRun::CarrySlots):
/// the forward pass's (every carry; those its outputs do not store) and the reverse pass's.
enum SlotCopies : int { kSlotsForward, kSlotsForwardNew, kSlotsReverse };

// What a ScanCache keeps: the plan, the compiled program, and what a call must match to reuse them.
struct ScanCache::Entry {
  std::shared_ptr<ScanPlan> plan;
  std::unique_ptr<StepProgram> program;
  Name over;
  int64_t steps = 0;
  ScanOptions opt;
  std::vector<std::tuple<Axes, DType, uint16_t>> init_shapes, x_shapes, capture_shapes;  // and shardings
  std::vector<char> tracked;       // per capture: a parameter of the tape at the trace
  std::vector<Tensor> fixed;       // per capture: its value then, when untracked
  std::vector<Name> mapped;        // the nmap axes active then
  std::vector<int> param_capture;  // per plan parameter: the capture it is
  std::vector<Axes> widen;         // per carry: the mapped axes init was broadcast to (widen_to_mapped)
  std::vector<Axes> widened_axes;  // per carry: the widened init's axes, in its order
};

/// Everything one scan call needs again in its reverse pass.
struct ScanRun final : CustomNode {
  std::shared_ptr<ScanPlan> plan;
  std::unique_ptr<StepProgram> program;  // compiled on first use
  std::vector<Tensor> init, xs;
  std::vector<Tensor> params;  // this call's tensors behind the plan's parameters
  Name over;
  int64_t steps = 0;
  ScanOptions opt;
  std::vector<Tensor> checkpoints;  // per carry: (__scan_checkpoint, carry axes...), every-k mode
  // Per carry: the reverse pass never reads its value (ScanPlan::carries_needed_backward), so
  // its checkpoints are neither stored nor loaded (their slots stay as allocated).
  std::vector<char> unneeded;
  bool bisection = false;           // memory_budget below all carries: recursive bisection
  // A call through a ScanCache: the entry its program goes back into when this run is done (once
  // its forward pass completed), and the cache.
  std::unique_ptr<ScanCache::Entry> entry;
  std::weak_ptr<ScanCache> cache;
  bool complete = false;

  ScanRun() = default;
  ScanRun(const ScanRun&) = delete;
  ScanRun& operator=(const ScanRun&) = delete;
  ~ScanRun() override;

  [[nodiscard]] int64_t index(int64_t s) const { return opt.reverse ? steps - 1 - s : s; }
  [[nodiscard]] const char* name() const override { return "scan"; }
  [[nodiscard]] bool batched_vjp() const override { return true; }
  [[nodiscard]] int64_t residual_bytes() const override;
  StepProgram& compiled();

  /// Per carry, a buffer of carries along kCheckpointAxis with copies to and from the program's carry.
  struct CarrySlots {
    std::vector<SliceCopy> load, store;
    CarrySlots() = default;
    // `no_store` / `no_load` (per carry, optional): carries whose slots are written elsewhere (no
    // store copy), or that the step reads from their slots in place (no load copy).
    CarrySlots(const std::vector<Tensor>& slots, const std::vector<Tensor>& carry,
               const std::vector<char>* no_store = nullptr, const std::vector<char>* no_load = nullptr);
    /// The same, rebinding the copies a call before kept in `p` under `role` (keep) where they
    /// are the same copies and the slots are laid out alike (SliceCopy::rebind); `carry` is p's.
    CarrySlots(StepProgram& p, int role, const std::vector<Tensor>& slots, const std::vector<Tensor>& carry,
               const std::vector<char>* no_store = nullptr, const std::vector<char>* no_load = nullptr);
    /// Files the copies in `p` under `role` for the next call (StepProgram::keep_copies).
    void keep(StepProgram& p, int role);
    void to_carry(int64_t i) {
      for (auto& c : load) c.run(i);
    }
    void from_carry(int64_t i) {
      for (auto& c : store) c.run(i);
    }
  };
  /// `n` carry slots per carry.
  [[nodiscard]] std::vector<Tensor> new_slots(int64_t n) const;

  /// Steps from..steps-1 forwards (carry in the program's carry; step from-1 already ran, so the
  /// programs are built) as one fused loop, storing checkpoints every checkpoint_every steps when
  /// `store_ck` (inside the loop for every step; else one copy per chunk of steps between fused
  /// runs) and ys through `y_store`. False when the step does not fuse (then nothing ran).
  bool fused_forward(CarrySlots& ck, bool store_ck, const std::vector<SliceCopy>& y_store, int64_t from);

  /// Takes ranges of the outputs' cotangents along the scanned axis (the final state's select);
  /// refuses one of a carry or along another axis.
  bool accept_cotangent_ranges(const std::vector<CotangentRange>& ranges) override;
  void vjp(const std::vector<Tensor>& cot, const std::vector<Tensor>& adj) override;
  /// Takes the demanded slices of the outputs' tangents for the next jvp() (the final state's
  /// select): stacked outputs written only there, an unneeded one not at all.
  bool accept_tangent_ranges(const std::vector<CotangentRange>& ranges) override;
  /// Forward mode (autodiff/scan_tangent.cpp): the steps run again from `init`, each followed by
  /// its ops' JVP rules (ScanPlan::forward_tangent), the carries' tangents handed on; on the host
  /// as kernel programs captured at the first step (compiled_jvp), except where the tangents
  /// enter on a window of their batch that moves with the steps (then op by op).
  bool jvp(const std::vector<Tensor>& tangents, const Axes& batch, std::vector<Tensor>& out) override;
  /// jvp() compiled (autodiff/scan_tangent_program.cpp), with the stacked outputs' tangents
  /// written at the steps `wanted` only; false (then nothing of it is used) where it does not
  /// apply: a device, no steps, TENAX_SCAN_TANGENT_PROGRAM=0, or carries' tangents the replays
  /// would copy per step beyond 32 KiB in all (known once the first steps are captured).
  bool compiled_jvp(const std::vector<Tensor>& tangents, const Axes& batch,
                    const std::vector<std::pair<int64_t, int64_t>>& wanted, std::vector<Tensor>& out);
  /// The steps [first, second) of each stacked output whose tangents the next jvp() must write.
  std::vector<std::pair<int64_t, int64_t>> wanted_steps();

 private:
  // The fused forms of the reverse sweep, built once the first chunk has built the programs.
  struct ReverseLoops {
    std::unique_ptr<ScalarLoop> forwards, backwards;
    std::vector<Tensor> stacked;  // the tensors their moving operands point into (StepProgram::keep_loop)
    // On a device with every carry kept: the checkpoint, x_t, the step and its reverse step as one
    // program per step (one graph launch).
    std::unique_ptr<KernelProgram> device;
    bool fused = false, tried = false;
  };

  bool device_forward(CarrySlots& ck, bool store_ck, const std::vector<SliceCopy>& y_store, int64_t from);
  void advance(int64_t a, int64_t b);
  void reverse_range(CarrySlots& snap, int64_t a, int64_t b, int64_t depth);
  void reverse_chunks(CarrySlots& ck, int64_t k);
  void reverse_chunk_step_by_step(CarrySlots& segment, int64_t c, int64_t e);
  void build_reverse_loops(ReverseLoops& loops, CarrySlots& slots, CarrySlots& segment, int64_t k);
  [[nodiscard]] Axes batch_axes(const std::vector<Tensor>& adj) const;
  /// Zeroes the outputs' cotangents outside their ranges, where a fused or device loop is about
  /// to read every step's (the ranges then cover everything).
  void zero_outside_ranges();
  /// Sets this pass's ranges (accept_cotangent_ranges) on the program, or zeroes outside them.
  void use_ranges(const std::vector<Tensor>& ys_bar);

  // x_t, the step and the next carry, fused: what advance() runs (built with the forward programs;
  // it holds no reverse-pass buffers, so it serves every reverse pass of this scan).
  std::unique_ptr<ScalarLoop> advance_loop_;
  bool advance_tried_ = false;
  // x_t, the step and its reverse step, fused (per reverse pass: it holds that pass's adjoints).
  std::unique_ptr<ScalarLoop> leaf_loop_;
  // The next pass's cotangent ranges (accept_cotangent_ranges), and that pass's outputs' cotangents.
  std::vector<CotangentRange> ranges_;
  std::vector<Tensor> ys_bar_;
  // The next jvp()'s demanded slices of the stacked outputs' tangents (accept_tangent_ranges).
  std::vector<CotangentRange> tangent_ranges_;
};

}  // namespace tenax::detail
