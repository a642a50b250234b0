#pragma once
// jacobian: the full derivative of a function of named tensors, by vectorised reverse mode (one
// sweep with a batch of cotangents) or by vectorised forward mode (one sweep with a batch of
// tangents per argument).
#include <vector>

#include "tenax/autodiff/grad.h"

namespace tenax {

struct JacobianOptions {
  enum class Mode {
    /// One reverse sweep whose cotangent carries the whole basis of the output as batch axes
    /// (vectorised VJPs). Where an op's VJP cannot take batch axes (the linear-algebra ops, map),
    /// it falls back to one sweep per output element on the same recorded tape.
    reverse,
    /// Per argument, one forward sweep whose tangent carries the argument's basis as batch axes
    /// (vectorised JVPs) on one recorded tape; cheaper than reverse when the inputs have fewer
    /// elements than the output. Where an op's JVP cannot take batch axes (none of the registered
    /// ops today), one sweep per argument element. scan and map nodes have no forward mode yet.
    forward,
  };
  Mode mode = Mode::reverse;
};

/// The Jacobian of f at `args`: one tensor per argument whose axes are f's output axes followed
/// by the argument's axes, J[o..., i...] = d f[o...] / d arg[i...]. An argument axis whose name
/// is also an output axis is renamed to name + "_in" (e.g. the Jacobian of f: (h) -> (h) has axes
/// (h, h_in)). Host tensors only; float64 or float32 outputs.
std::vector<Tensor> jacobian(const Function& f, const std::vector<Tensor>& args, const JacobianOptions& options = {});

}  // namespace tenax
