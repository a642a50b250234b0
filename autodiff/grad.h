#pragma once
// Functional differentiation: grad, value_and_grad, vjp (reverse mode) and jvp (forward mode).
#include <functional>
#include <utility>
#include <vector>

#include "tenax/core/tensor.h"

namespace tenax {

/// A differentiable function of named tensors.
using Function = std::function<Tensor(const std::vector<Tensor>& args)>;

/// f(args) and the gradient of f with respect to each argument; f must return one element.
std::pair<Tensor, std::vector<Tensor>> value_and_grad(const Function& f, const std::vector<Tensor>& args);

/// The gradient of f (one element) with respect to each argument.
std::vector<Tensor> grad(const Function& f, const std::vector<Tensor>& args);

/// The result of vjp: f's value and its pullback, which maps a cotangent of the value (same axes,
/// any order) to one cotangent per argument. The pullback keeps f's tape alive and may be called
/// several times.
struct VjpResult {
  Tensor value;
  std::function<std::vector<Tensor>(const Tensor& cotangent)> pullback;
};

/// Reverse mode for any output shape.
VjpResult vjp(const Function& f, const std::vector<Tensor>& args);

/// Forward mode: f(primals) and its directional derivative along `tangents` (one per primal,
/// with the primal's axes; an undefined tangent is zero). Uses each op's JVP rule. Tangents with
/// extra (batch) axes compute several directional derivatives at once (see Tape::forward_tangent).
std::pair<Tensor, Tensor> jvp(const Function& f, const std::vector<Tensor>& primals,
                              const std::vector<Tensor>& tangents);

}  // namespace tenax
