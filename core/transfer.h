#pragma once
// Moving tensors between devices: the only way data crosses from host to device or back.
#include "tenax/core/device.h"
#include "tenax/core/tensor.h"

namespace tenax {

/// `t` on `device`: the same tensor when it is there already, otherwise a new contiguous tensor
/// with the same axes and values (host <-> CUDA device, or device <-> device). The copy is
/// complete when to() returns. A strided view is made contiguous first, on its own device.
/// Differentiable in reverse mode: the cotangent moves back to `t`'s device (inside a scan body
/// it is an Error: transfers belong outside the loop; forward mode through it is not built).
[[nodiscard]] Tensor to(const Tensor& t, Device device);

}  // namespace tenax
