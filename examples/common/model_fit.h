#pragma once
// Shared by the examples: fit a JSON model's trainable parameters by minimising one of its scalar
// outputs with L-BFGS (LBFGSpp), gradients by reverse mode, one progress report per iteration.
#include <functional>
#include <string>

#include "tenax/tenax.h"

namespace example {

/// One L-BFGS iteration as the progress callback sees it (the objective is scale * output).
struct Progress {
  int iteration = 0;
  double objective = 0.0;  ///< at the accepted point
  double grad_norm = 0.0;  ///< norm of the objective's gradient (in the fit's coordinates, see minimize)
  double seconds = 0.0;    ///< since the fit started
};
struct FitOptions {
  int max_iterations = 200;
  double gradient_tolerance = 1e-6;  ///< on the objective's gradient norm
};
struct FitResult {
  int iterations = 0;
  int evaluations = 0;
  double objective = 0.0;
  double seconds = 0.0;
  bool converged = false;
  std::string reason;  ///< why the fit stopped: "the gradient norm ... <= ...", "the iteration limit ..."
  int failed_points = 0;  ///< trial points whose evaluation raised NumericError (the line search backed off)
};

/// Minimises scale * model.value_and_grad(output, inputs) over the trainable parameters
/// (scale = -1/n maximises a log-likelihood per observation) in the model's unconstrained
/// coordinates, except that a softplus-positive parameter is moved through the log of its value
/// (scale-free: the gradient tolerance means the same for a variance of 1e-3 and of 1e4); leaves
/// the model at the best point it evaluated. A trial point where the model raises NumericError
/// (a covariance that is not positive definite) counts as +infinity, so the line search backs off;
/// where L-BFGS itself gives up (no descent, the line search exhausted) the result says so with
/// converged = false instead of throwing. `progress` is called after every iteration.
FitResult minimize(tenax::Model& model, const std::string& output, const tenax::TensorMap& inputs,
                   double scale, const FitOptions& options,
                   const std::function<void(const Progress&)>& progress = {});

}  // namespace example
