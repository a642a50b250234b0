#pragma once
// User-defined differentiable functions: a forward computation and the reverse rule you give it.
#include <functional>
#include <string>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

/// The reverse rule of a custom_vjp function: from its inputs, its outputs and the outputs'
/// cotangents (undefined where zero), one cotangent per input with that input's axes (in any
/// order; undefined: zero). It runs during the reverse sweep, without recording (no gradients of
/// gradients through it), inside the same nmap/map context as the forward.
using CustomVjpRule = std::function<std::vector<Tensor>(
    const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const std::vector<Tensor>& cotangents)>;

/// Runs `forward` on `inputs` without recording its ops, and records ONE node named `name` whose
/// reverse rule is `vjp`: for a gradient you know better than its ops (a stable closed form, an
/// implicit-function adjoint, code outside Tenax). The forward's own ops are never differentiated.
/// Cotangents with batch axes (jacobian) go through the rule one index at a time. Forward mode
/// (jvp) and use inside a scan body raise AutodiffError / Error naming `name`. A rule returning
/// the wrong number of cotangents, or one whose axes differ from its input's, raises AutodiffError
/// naming `name` and the input.
std::vector<Tensor> custom_vjp(const std::string& name,
                               const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& forward,
                               const CustomVjpRule& vjp, const std::vector<Tensor>& inputs);

}  // namespace tenax
