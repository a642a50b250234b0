#pragma once
// Library-internal: the flat tape (one record per op call, integer variable ids, residuals kept
// per the op's declaration) and its reverse and forward sweeps.
#include <vector>

#include "tenax/autodiff/tape.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {

/// One recorded op call.
struct Record {
  const OpDef* op;
  Attrs attrs;
  int32_t out;          ///< output variable
  int32_t first_input;  ///< into TapeImpl::inputs_ (variable ids; -1 for constants)
  int32_t n_inputs;
  int32_t first_saved;  ///< into TapeImpl::saved_: the op's declared residuals, inputs then output
};

/// Per-variable facts the sweeps need without keeping the tensor alive.
struct VarInfo {
  Axes axes;
  DType dtype;
  Device device;
  int32_t record;  ///< creating record, -1 for watched inputs
};

class TapeImpl final : public Recorder {
 public:
  explicit TapeImpl(uint32_t serial) : serial_(serial) {}

  void record(const OpDef& op, const Tensor* inputs, int n, const Attrs& attrs, Tensor& out) override;
  Tensor watch(const Tensor& t);
  std::vector<Tensor> gradient(const Tensor& output, const std::vector<Tensor>& wrt, const Tensor& cotangent);
  Tensor forward_tangent(const Tensor& output, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& tangents);

  [[nodiscard]] uint32_t serial() const { return serial_; }
  void keep_all() { keep_all_ = true; }
  [[nodiscard]] TapeStats stats() const;
  [[nodiscard]] int64_t bytes() const;

  /// The adjoint of variable v: allocated zeroed on first use, or a view of the parent's adjoint.
  Tensor& adjoint(int32_t v);
  [[nodiscard]] const std::vector<Record>& records() const { return records_; }
  [[nodiscard]] const std::vector<int32_t>& inputs() const { return inputs_; }
  [[nodiscard]] const std::vector<Tensor>& saved() const { return saved_; }
  [[nodiscard]] const VarInfo& var(int32_t v) const { return vars_[static_cast<size_t>(v)]; }

 private:
  int32_t new_var(const Tensor& t, int32_t record);
  int32_t var_of(const Tensor& t, const char* what) const;

  uint32_t serial_;
  bool keep_all_ = false;
  std::vector<Record> records_;
  std::vector<int32_t> inputs_;
  std::vector<Tensor> saved_;
  std::vector<VarInfo> vars_;
  std::vector<Tensor> adjoints_;
  int64_t adjoint_buffers_ = 0, adjoint_bytes_ = 0, residual_bytes_ = 0;
};

}  // namespace tenax::detail
