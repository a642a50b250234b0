#pragma once
// nmap: a vectorised map over named axes (DESIGN contract 4).
#include <functional>
#include <vector>

#include "tenax/autodiff/grad.h"

namespace tenax {

/// A function of named tensors with several results.
using MultiFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& args)>;

/// Applies f to every slice of `args` along the `over` axes and stacks the results along the same
/// axes, by vectorisation: f runs ONCE, on the whole tensors, and every op carries the mapped axes
/// as batch axes (named/batching.h), never a loop over slices. Differentiable like any ops.
/// - An argument without an `over` axis is shared by every slice (no copy).
/// - Inside f, naming a mapped axis is an AxisError and reductions over "all axes" leave mapped
///   axes out. Layout queries (axes(), rank(), size()) still show them.
/// - A result that does not depend on a mapped axis is broadcast along it as a view (no copy per
///   slice).
/// - grad, value_and_grad, vjp, jvp and jacobian inside f are per slice (per-example gradients
///   and Jacobians; docs/decisions.md, "Transforms inside nmap are per slice").
/// Throws AxisError when an `over` axis is in no argument or is already mapped by an enclosing
/// nmap, and ShapeError when arguments disagree on its size.
std::vector<Tensor> nmap(const MultiFunction& f, const AxisList& over, const std::vector<Tensor>& args);

/// nmap for a function with one result.
Tensor nmap(const Function& f, const AxisList& over, const std::vector<Tensor>& args);

}  // namespace tenax
