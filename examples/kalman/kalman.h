#pragma once
// The Kalman example's pieces, shared by the command-line program and its tests: the embedded
// default model, simulation from a model's parameters, and the L-BFGS fit of the log-likelihood.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tenax/tenax.h"

namespace kalman {

/// examples/kalman/model.json, compiled into the program.
nlohmann::json default_model();

/// Observations (series, time, obs) and true states (series, time, state) drawn from the model's
/// current parameters (F, Q, H, r, m0, P0) with a seeded generator.
struct Simulation {
  tenax::Tensor y;
  tenax::Tensor x;
};
Simulation simulate(const tenax::Model& model, int64_t series, int64_t steps, uint64_t seed);

/// Observations of one series from a CSV file: one line per time step, `p` comma-separated numbers
/// per line; the first line may be a header (no cell a number or a missing value), no other. With
/// `allow_missing`, an empty cell, NA or nan (any case) is a missing observation, read as NaN.
/// Throws tenax::Error naming the file, the line and the column for a blank or ragged line, a cell
/// that is not a number (or a missing value without `allow_missing`), a non-finite number, fewer
/// than 2 lines of numbers, or every observation missing.
tenax::Tensor read_csv_observations(const std::string& path, int64_t p, bool allow_missing = false);

/// The model's input 'observed' (time, obs) for observations y (series, time, obs): 1 where y is a
/// number, 0 where it is NaN. The Kalman model shares one pattern of gaps between its series (so
/// that their covariances stay shared): series with gaps in different places are an Error.
tenax::Tensor observed_mask(const tenax::Tensor& y);

/// One L-BFGS iteration as the progress callback sees it.
struct Progress {
  int iteration = 0;
  double loglik = 0.0;     ///< total log-likelihood at the accepted point
  double grad_norm = 0.0;  ///< norm of the gradient of loglik / observations (what L-BFGS sees)
  double seconds = 0.0;    ///< since the fit started
};

struct FitOptions {
  int max_iterations = 200;
  double gradient_tolerance = 1e-6;  ///< on the per-observation gradient norm
};

struct FitResult {
  int iterations = 0;
  int evaluations = 0;
  double loglik = 0.0;
  double seconds = 0.0;
  bool converged = false;
  std::string reason;     ///< why the fit stopped
  int failed_points = 0;  ///< trial points where the filter failed (the line search backed off)
};

/// Maximises model.value_and_grad("loglik") over the trainable parameters (unconstrained) with
/// LBFGSpp; leaves the model at the best point found and says whether that is an optimum
/// (example::minimize). `progress` is called after every iteration.
FitResult fit(tenax::Model& model, const tenax::TensorMap& inputs, const FitOptions& options,
              const std::function<void(const Progress&)>& progress = {});

/// uncertainty(model, inputs).se_unconstrained: 0 where the likelihood does not depend on a
/// coordinate (the unused upper triangle of an spd parameter), all 0 when the information is
/// near-singular.
std::vector<double> standard_errors(tenax::Model& model, const tenax::TensorMap& inputs);

/// The estimates' uncertainty at the model's current point (an optimum of "loglik").
struct Uncertainty {
  /// Observed information in unconstrained coordinates: minus the Hessian of loglik, by central
  /// differences of the exact (reverse-mode) gradient, symmetrised. Row-major, n x n.
  std::vector<double> information;
  std::vector<double> se_unconstrained;  ///< per coordinate; 0 where the likelihood ignores it
  /// Per element of the trainable parameters (in Model::flatten order), in the constrained values
  /// the model reports, by the delta method: cov = J cov_u J^T with J = d value / d u by central
  /// differences of the constraint maps.
  std::vector<double> se;
  /// Largest over smallest eigenvalue of the information on the identified coordinates (infinite
  /// when an eigenvalue is <= 0); near_singular when above 1e10 or infinite: the standard errors
  /// are then not to be trusted and se is empty.
  double condition = 0.0;
  bool near_singular = false;
};
Uncertainty uncertainty(tenax::Model& model, const tenax::TensorMap& inputs);

}  // namespace kalman
