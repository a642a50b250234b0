// to(device): contiguous copies between host and device memory through the CUDA backend's
// transfer function.
#include "tenax/core/transfer.h"

#include <string>

#include "tenax/core/creation.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {

Tensor to(const Tensor& t, Device device) {
  if (!t.defined()) throw Error("[to] the tensor is undefined");
  if (t.device() == device) return t;
  if (detail::is_tracked(t))
    throw AutodiffError("[to] moving a tensor the tape tracks between devices is not differentiable yet; move "
                        "inputs before recording, or results after the gradient");
  const Device gpu = device.kind == Device::Kind::cuda ? device : t.device();
  detail::require_device(gpu, "to");
  // A strided view is first made contiguous where it lives (host loop or device copy kernel).
  const Tensor src = t.is_contiguous() ? t : contiguous(t);
  Tensor dst = empty(t.axes(), t.dtype(), device);
  const detail::TransferFn move = detail::kernels(gpu).transfer;
  if (!move) throw DeviceError("[to] no transfer function for " + gpu.str());
  move(dst.data_ptr(), device, src.data_ptr(), t.device(), static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
  return dst;
}

}  // namespace tenax
