// to(device): contiguous copies between host and device memory through the CUDA backend's
// transfer function.
#include "tenax/core/transfer.h"

#include <memory>
#include <string>
#include <vector>

#include "tenax/core/creation.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {
namespace {

// The reverse rule of a transfer: the cotangent moves back to the input's device.
struct TransferNode final : detail::CustomNode {
  Device from;
  explicit TransferNode(Device d) : from(d) {}
  [[nodiscard]] const char* name() const override { return "to"; }
  void vjp(const std::vector<Tensor>& cot, const std::vector<Tensor>& adj) override {
    if (cot[0].defined() && adj[0].defined()) detail::accumulate(adj[0], to(cot[0], from));
  }
  [[nodiscard]] int64_t residual_bytes() const override { return 0; }
  [[nodiscard]] bool batched_vjp() const override { return true; }
};

}  // namespace

Tensor to(const Tensor& t, Device device) {
  if (!t.defined()) throw Error("[to] the tensor is undefined");
  if (t.device() == device) return t;
  const Device gpu = device.kind == Device::Kind::cuda ? device : t.device();
  detail::require_device(gpu, "to");
  // A strided view is first made contiguous where it lives (host loop or device copy kernel; on
  // the tape like any op when t is tracked).
  const Tensor src = t.is_contiguous() ? t : contiguous(t);
  Tensor dst = empty(t.axes(), t.dtype(), device);
  const detail::TransferFn move = detail::kernels(gpu).transfer;
  if (!move) throw DeviceError("[to] no transfer function for " + gpu.str());
  move(dst.data_ptr(), device, src.data_ptr(), t.device(), static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
  detail::TensorAccess::set_shard(dst, t.shard_id());  // a rank's block on its device is still the rank's block
  if (detail::is_tracked(src)) {
    std::vector<Tensor> out{dst};
    detail::g_record_state.recorder->record_custom(std::make_shared<TransferNode>(t.device()), {src}, out);
    return out[0];
  }
  return dst;
}

}  // namespace tenax
