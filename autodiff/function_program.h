#pragma once
// Library-internal: a compiled function's traced plan captured to kernel programs on buffers of its
// own — the forward program once, the reverse program per kind of reverse pass — replayed on each
// call's arguments (autodiff/compile.cpp).
#include <memory>
#include <vector>

#include "tenax/autodiff/scan_plan.h"
#include "tenax/core/ops/capture.h"

namespace tenax::detail {

/// One set of buffers for a traced function: the arguments are copied into buffers of its own,
/// the forward program (captured by the first forward()) computes every value of the plan in
/// place, and the outputs are copied out, so no captured call points at memory of one call. Used
/// by one call at a time: a call recorded on a tape holds it until the tape lets go, so that the
/// reverse pass reads that call's values.
class FunctionProgram {
 public:
  /// `plan`: traced with no carries and one x per argument; `args` give the buffers' devices.
  /// `forward_mode`: tangent() will be asked for, so the forward replay writes every value (the
  /// JVP rules read every op's inputs and output).
  FunctionProgram(std::shared_ptr<const ScanPlan> plan, const std::vector<Tensor>& args, bool forward_mode = false);
  FunctionProgram(const FunctionProgram&) = delete;
  FunctionProgram& operator=(const FunctionProgram&) = delete;
  ~FunctionProgram() = default;

  /// Runs the function on `args` (the traced signature's axes and dtypes): new tensors, one per
  /// output, that later calls do not touch.
  std::vector<Tensor> forward(const std::vector<Tensor>& args);

  /// The reverse pass of the call last run forwards: `cotangents` of the outputs (undefined: zero;
  /// any axis order; extra axes, the same for all, are batch axes: several VJPs at once) and
  /// `adjoints` of the arguments to add to (undefined: not wanted). The reverse program is
  /// captured the first time, and again when a pass wants other adjoints or batch axes.
  void backward(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints);

  /// Forward mode for the call last run forwards (a program made with forward_mode): the outputs'
  /// tangents (new tensors; zeros where none reaches an output) from the arguments' `tangents`
  /// (undefined: zero; `batch` axes beyond each argument's). The tangent program is captured the
  /// first time, and again for other batch axes or other arguments with tangents.
  std::vector<Tensor> tangent(const std::vector<Tensor>& tangents, const Axes& batch);

  /// Bytes of the buffers (the arguments' and every value's), counted when a program is built.
  [[nodiscard]] int64_t bytes() const { return bytes_; }

 private:
  void build_forward();
  bool prepare_pass(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints);
  void build_backward();
  void count_bytes();
  [[nodiscard]] const Tensor& x_buffer(size_t k) const { return values_[k]; }

  std::shared_ptr<const ScanPlan> plan_;
  // The blocks the values and the adjoints are carved from (host; first, so that they go last).
  std::unique_ptr<HostArena> values_arena_, adjoints_arena_;
  std::vector<Tensor> values_;  // per plan variable: the argument buffers first, then op outputs
  KernelProgram forward_;
  bool forward_built_ = false;
  bool host_ = true;
  int64_t bytes_ = 0;  // bytes(): count_bytes() after each build

  // The reverse program and what it was built for: which arguments want adjoints, which outputs
  // are seeded, and the batch axes. The cotangents are copied into cot_ before each replay.
  std::vector<char> x_needs_, seeded_, needs_;
  Axes batch_;
  std::vector<Tensor> adjoints_, cot_;
  KernelProgram seed_, vjp_;
  bool backward_built_ = false;

  // The tangent program: which arguments have tangents, the batch axes, the tangents' buffers
  // (per plan variable; the arguments' are filled before each replay).
  bool forward_mode_ = false;
  std::vector<char> tangent_args_;
  Axes tangent_batch_;
  std::vector<Tensor> tangents_;
  KernelProgram tangent_;
  bool tangent_built_ = false;
};

}  // namespace tenax::detail
