#pragma once
// Library-internal: copies between a fixed buffer and one slice of a stacked tensor along an axis
// (a scan's x_t, y_t, their adjoints, its carry checkpoints), with their loop arguments computed
// once; strided slices move through a block-sized stage.
#include <memory>

#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/inline_call.h"

namespace tenax::detail {

/// A block of consecutive slices of a tensor along one axis, held dense (the slice's axes inner,
/// the block's steps outer). Where the axis is not the tensor's outer one, consecutive slices
/// share cache lines, so that copying one slice per step touches a line per element; the stage
/// moves a block of steps at once (the copy kernels' transposing loops: each line read or written
/// once), and the per-step copies read or write its dense rows.
class SliceStage {
 public:
  /// Whether staging pays for slices of `whole` along `over` laid out as `slice`: on the host,
  /// neighbouring slices closer than a cache line, more than one step, and a slice whose lines
  /// (one per element) span 1 MiB or more (fewer stay cached from one step to the next).
  static bool wanted(const Tensor& whole, const Tensor& slice, Name over);
  /// `write_back`: the rows are written (loaded from `whole` on entry, written back on leaving).
  SliceStage(const Tensor& whole, Name over, bool write_back);
  /// Row 0 of the stage (the slice's axes, dense) and the bytes between rows.
  [[nodiscard]] const Tensor& row0() const { return row0_; }
  [[nodiscard]] int64_t row_bytes() const { return row_bytes_; }
  /// The row that holds slice i, its block loaded first (the block held before written back).
  int64_t enter(int64_t i);
  /// Writes the held block back (write_back only) and forgets it.
  void flush();

 private:
  void move(bool into_stage);
  Tensor whole_, rows_, row0_;
  ElementwiseFn copy_ = nullptr;
  LoopDims dims_;                 ///< (over: block steps, slice axes...), dim 0 cut for the last block
  LoopArg whole_arg_, rows_arg_;  ///< the whole's at step 0, the stage's
  int64_t whole_step_bytes_ = 0, row_bytes_ = 0, block_ = 1, steps_ = 0, held_ = -1;
  bool write_back_ = false;
};

/// A copy (or accumulation) between a fixed buffer and slice i of a tensor along one axis, with
/// its loop arguments computed once. It holds both tensors, so their buffers outlive it.
class SliceCopy {
 public:
  SliceCopy() = default;
  /// into_fixed: fixed (+)= whole[over = i]; else whole[over = i] (+)= fixed.
  /// `staged`: on the host, slices that share cache lines with their neighbours (the scanned axis
  /// is not the outer one) move through a SliceStage, a block of steps at a time; a copy into
  /// `whole` then holds its last block until flush(). Only for a `whole` that nothing else reads
  /// or writes while the copy is in use (a scan's inputs, output cotangents, input adjoints).
  SliceCopy(const Tensor& fixed, const Tensor& whole, Name over, bool into_fixed, bool accumulate,
            bool staged = false);
  void run(int64_t i);
  /// The same copy for another stacked tensor laid out as the one it was made for (the same axes
  /// in the same order, strides and dtype; only the memory differs): repoints it there and returns
  /// true; false (nothing changed) for one laid out otherwise, or a staged copy.
  bool rebind(const Tensor& whole);
  /// Lets go of the stacked tensor until rebind() gives it another (a staged copy, whose stage
  /// holds it too, is dropped whole: it cannot be rebound); a released copy must not run.
  void release() {
    if (stage_)
      *this = SliceCopy();
    else
      whole_ = Tensor();
  }
  /// Writes a staged copy's held block into `whole` (nothing otherwise): call when a sweep ends.
  void flush();
  /// On a device, while a capture is active: runs it at step s (slice origin + dir * s) and records
  /// it as a moving call, so that the program replays it at the slice of the step it runs as (its
  /// replay index is the step). On the host: run(origin + dir * s).
  void run_or_record(int64_t s, int64_t origin, int64_t dir);
  /// Appends it to a device program as a moving call at slice origin + dir * step.
  void append_to(KernelProgram& program, int64_t origin, int64_t dir) const;
  [[nodiscard]] bool on_host() const { return fixed_.device().kind == Device::Kind::cpu; }
  /// The stacked tensor it walks (undefined for a default-made copy), the fixed one, and which
  /// way it copies.
  [[nodiscard]] const Tensor& whole() const { return whole_; }
  [[nodiscard]] const Tensor& fixed() const { return fixed_; }
  [[nodiscard]] bool into_fixed() const { return moving_ == 1; }
  /// Appends this copy to `loop` with slice index origin + dir * step (with `relative`: step minus
  /// the run's offset, ScalarLoop::run); false when the slice is not one element.
  bool append_to(ScalarLoop& loop, int64_t origin, int64_t dir, bool relative = false) const;
  /// Where slice origin + dir * step lies, as a KernelProgram::MovingBase; false (b unchanged)
  /// when the slices are not laid out as the fixed tensor (then only copies can move them).
  bool moving_base(int64_t origin, int64_t dir, KernelProgram::MovingBase& b) const;

 private:
  Tensor fixed_, whole_;
  Axes whole_axes_;  ///< the layout rebind() asks for: whole_'s axes, strides and dtype when made
  int64_t whole_strides_[kMaxRank] = {};
  DType whole_dtype_ = DType::f64;
  ElementwiseFn fn_ = nullptr;
  LoopDims dims_;
  LoopArg args_[2];
  FlatFn flat_ = nullptr;  ///< set when the slice is small and collapses to one loop dimension
  int64_t outer_ = 1, count_ = 0;
  FlatArg flat_args_[2];
  /// float64 flat copies: the same copy as an InlineCall (run when set; its moving operand is
  /// repointed per step), which skips the flat kernel's generic loop.
  InlineCall inline_;
  int moving_ = 0;
  bool accumulate_ = false;
  bool same_layout_ = false;  ///< each slice has the fixed tensor's strides
  char* base_ = nullptr;
  int64_t stride_bytes_ = 0;
  /// Then base_ and stride_bytes_ walk its rows; copies of this SliceCopy share it.
  std::shared_ptr<SliceStage> stage_;
};

}  // namespace tenax::detail
