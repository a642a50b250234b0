// Copies between a fixed buffer and slices of a stacked tensor, directly or through a stage.
#include "tenax/autodiff/slice_copy.h"

#include <algorithm>
#include <cstdlib>

#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// Steps per block: two cache lines of float64 steps (each line of the tensor read once per block),
// what the copy kernels' transposing tiles take in one pass (backends/cpu/transpose_copy.cpp).
constexpr int64_t kStageSteps = 16;
constexpr int64_t kLine = 64;
// Slices whose lines (one per element) span at least this many bytes are staged: fewer stay in
// the caches from one step to the next (the lines of a scan in blocks, scan_blocked.h, do).
constexpr int64_t kStageLines = int64_t{1} << 20;

}  // namespace

bool SliceStage::wanted(const Tensor& whole, const Tensor& slice, Name over) {
  const int64_t step = std::abs(whole.stride(over)) * static_cast<int64_t>(itemsize(whole.dtype()));
  return whole.device().kind == Device::Kind::cpu && step < kLine && whole.size(over) > 1 &&
         slice.numel() * kLine >= kStageLines;
}

SliceStage::SliceStage(const Tensor& whole, Name over, bool write_back)
    : whole_(whole), steps_(whole.size(over)), write_back_(write_back) {
  const Tensor slice = select(whole, over, 0);
  const int64_t item = static_cast<int64_t>(itemsize(whole.dtype()));
  row_bytes_ = slice.numel() * item;
  block_ = std::min(steps_, kStageSteps);
  Axes block_axes{{over, block_}};
  for (int i = 0; i < slice.rank(); ++i) block_axes.push_back(slice.axes()[i]);
  rows_ = empty(block_axes, whole.dtype(), whole.device());
  row0_ = select(rows_, over, 0);
  copy_ = need(kernels(whole.device()).copy[copy_index(whole.dtype())], "copy", whole.device());
  dims_ = loop_dims(block_axes);
  whole_arg_ = loop_arg(whole, block_axes);
  rows_arg_ = loop_arg(rows_, block_axes);
  whole_step_bytes_ = whole.stride(over) * item;
}

void SliceStage::move(bool into_stage) {
  const int64_t t0 = held_ * block_;
  LoopDims d = dims_;
  d.sizes[0] = std::min(block_, steps_ - t0);
  LoopArg a[2] = {rows_arg_, whole_arg_};
  a[1].data = static_cast<char*>(whole_arg_.data) + t0 * whole_step_bytes_;
  if (!into_stage) std::swap(a[0], a[1]);
  copy_(d, a);
}

int64_t SliceStage::enter(int64_t i) {
  const int64_t b = i / block_;
  if (b != held_) {
    flush();
    held_ = b;
    move(true);
  }
  return i - b * block_;
}

void SliceStage::flush() {
  if (held_ >= 0 && write_back_) move(false);
  held_ = -1;
}

SliceCopy::SliceCopy(const Tensor& fixed, const Tensor& whole, Name over, bool into_fixed, bool accumulate,
                     bool staged)
    : fixed_(fixed), whole_(whole), accumulate_(accumulate) {
  const int d = whole.axes().index_of(over);
  if (d < 0 || whole.axes().size(d) == 0)
    throw AxisError("[scan] internal: a slice copy along '" + over.str() + "' of " + whole.axes().describe());
  Tensor slice = select_view(whole, d, 0);
  whole_axes_ = whole.axes();
  std::copy(whole.strides(), whole.strides() + whole.rank(), whole_strides_);
  whole_dtype_ = whole.dtype();
  if (staged && fixed.device().kind == Device::Kind::cpu && SliceStage::wanted(whole, slice, over)) {
    // A store with accumulate reads its rows too: every staged store loads and writes back.
    stage_ = std::make_shared<SliceStage>(whole, over, !into_fixed);
    slice = stage_->row0();
  }
  const Axes& ax = fixed.axes();
  const KernelTable& k = kernels(fixed.device());
  fn_ = accumulate ? need(k.acc[numeric_index(fixed.dtype(), "scan")], "accumulate", fixed.device())
                   : need(k.copy[copy_index(fixed.dtype())], "copy", fixed.device());
  dims_ = loop_dims(ax);
  moving_ = into_fixed ? 1 : 0;
  args_[moving_] = loop_arg(slice, ax);
  args_[1 - moving_] = loop_arg(fixed, ax);
  base_ = static_cast<char*>(slice.data_ptr());
  stride_bytes_ = stage_ ? stage_->row_bytes() : whole.stride(over) * static_cast<int64_t>(itemsize(whole.dtype()));
  same_layout_ = !stage_ && slice.dtype() == fixed.dtype() && slice.rank() == fixed.rank();
  for (int i = 0; i < fixed.rank() && same_layout_; ++i) {
    const Name a = ax.name(i);
    same_layout_ = slice.has_axis(a) && (ax.size(i) == 1 || slice.stride(a) == fixed.stride(a));
  }
  FlatLoop loop;
  if (fixed.device().kind == Device::Kind::cpu && fixed.numel() <= kFlatLimit &&
      collapse_loop(dims_, args_, 2, loop)) {
    flat_ = flat_twin(fn_);
    outer_ = loop.outer;
    count_ = loop.count;
    for (int a = 0; a < 2; ++a) flat_args_[a] = {args_[a].data, loop.stride[a], loop.outer_stride[a]};
    if (fixed.dtype() == DType::f64) {
      ScalarLoop::Form form;
      form.kind = accumulate ? ScalarLoop::Kind::acc : ScalarLoop::Kind::copy;
      form.arity = 2;
      inline_ = resolve_form(form, flat_args_, outer_, count_);
    }
  }
}

bool SliceCopy::rebind(const Tensor& whole) {
  if (!fn_ || stage_ || !whole.defined() || whole.dtype() != whole_dtype_ || !(whole.axes() == whole_axes_) ||
      !std::equal(whole_strides_, whole_strides_ + whole.rank(), whole.strides()) ||
      whole.device() != fixed_.device())
    return false;
  whole_ = whole;
  base_ = static_cast<char*>(whole.data_ptr());  // slice 0
  args_[moving_].data = base_;
  flat_args_[moving_].data = base_;
  return true;
}

void SliceCopy::run(int64_t i) {
  if (stage_) i = stage_->enter(i);
  if (inline_.run) {
    char* at = base_ + i * stride_bytes_;
    if (moving_ == 0)
      inline_.o = reinterpret_cast<double*>(at);
    else
      inline_.a = inline_.b = reinterpret_cast<const double*>(at);
    inline_.run(inline_);
    return;
  }
  if (flat_) {
    flat_args_[moving_].data = base_ + i * stride_bytes_;
    flat_(outer_, count_, flat_args_);
    return;
  }
  args_[moving_].data = base_ + i * stride_bytes_;
  fn_(dims_, args_);
}

bool SliceCopy::moving_base(int64_t origin, int64_t dir, KernelProgram::MovingBase& b) const {
  if (!same_layout_) return false;
  b.at = base_ + origin * stride_bytes_;
  b.stride = dir * stride_bytes_;
  return true;
}

void SliceCopy::flush() {
  if (stage_) stage_->flush();
}

void SliceCopy::run_or_record(int64_t s, int64_t origin, int64_t dir) {
  if (on_host()) {
    run(origin + dir * s);
    return;
  }
  LoopArg at[2] = {args_[0], args_[1]};
  at[moving_].data = base_ + origin * stride_bytes_;
  g_capture->moving(fn_, dims_, at, moving_, dir * stride_bytes_, s);
}

void SliceCopy::append_to(KernelProgram& program, int64_t origin, int64_t dir) const {
  LoopArg at[2] = {args_[0], args_[1]};
  at[moving_].data = base_ + origin * stride_bytes_;
  program.append_moving(fn_, dims_, at, moving_, dir * stride_bytes_);
}

bool SliceCopy::append_to(ScalarLoop& loop, int64_t origin, int64_t dir, bool relative) const {
  if (stage_ || !flat_ || outer_ != 1 || count_ != 1) return false;
  ScalarLoop::Ins ins;
  ins.relative = relative;
  ins.arity = 2;
  ins.moving = static_cast<int8_t>(moving_);
  ins.p[moving_] = base_ + origin * stride_bytes_;
  ins.p[1 - moving_] = flat_args_[1 - moving_].data;
  ins.stride = dir * stride_bytes_;
  if (fixed_.dtype() == DType::f64) {
    ins.kind = accumulate_ ? ScalarLoop::Kind::acc : ScalarLoop::Kind::copy;
  } else {
    ins.fn = scalar_twin(fn_);
    if (!ins.fn) return false;
  }
  loop.push(ins);
  return true;
}

}  // namespace tenax::detail
