#pragma once
// Library-internal: the complex form of op abs (|z|, a real result), which op abs runs for complex
// inputs, and the lift of a real tensor to complex (imaginary part 0) that astype uses.
#include <vector>

#include "tenax/core/ops/op.h"

namespace tenax::detail {

Tensor complex_abs_forward(const Tensor& z);
void complex_abs_vjp(VjpContext& c);
Tensor complex_abs_jvp(JvpContext& c);
/// x (float64 / float32) as complex128 / complex64 with imaginary part 0.
Tensor as_complex(const Tensor& x);

void register_complex_ops(std::vector<const OpDef*>& ops);

}  // namespace tenax::detail
