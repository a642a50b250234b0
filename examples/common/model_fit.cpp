// L-BFGS over a model's unconstrained coordinates. LBFGSpp has no per-iteration callback: a
// line search wrapping its backtracking search reports each accepted point.
#include "model_fit.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <span>
#include <vector>

#include <LBFGS.h>
#include <Eigen/Core>

namespace example {
namespace {

using Clock = std::chrono::steady_clock;

// The progress hook of the line search below.
thread_local std::function<void(double fx, double gnorm)> g_iteration_done;

template <typename Scalar>
class ReportingLineSearch {
 public:
  using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;
  template <typename Foo>
  static void LineSearch(Foo& f, Scalar& fx, Vector& x, Vector& grad, Scalar& step, const Vector& drt,
                         const Vector& xp, const LBFGSpp::LBFGSParam<Scalar>& param) {
    LBFGSpp::LineSearchBacktracking<Scalar>::LineSearch(f, fx, x, grad, step, drt, xp, param);
    if (g_iteration_done) g_iteration_done(fx, grad.norm());
  }
};

}  // namespace

FitResult minimize(tenax::Model& model, const std::string& output, const tenax::TensorMap& inputs,
                   double scale, const FitOptions& options,
                   const std::function<void(const Progress&)>& progress) {
  const auto start = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  FitResult result;
  // The best point evaluated: where the fit ends if L-BFGS gives up half-way through a line search.
  const std::vector<double> u0 = model.unconstrained_vector();
  Eigen::VectorXd best = Eigen::Map<const Eigen::VectorXd>(u0.data(), Eigen::Index(u0.size()));
  double best_fx = std::numeric_limits<double>::infinity();
  std::string last_failure;
  auto objective = [&](const Eigen::VectorXd& u, Eigen::VectorXd& grad) {
    ++result.evaluations;
    model.set_unconstrained_vector(std::span<const double>(u.data(), size_t(u.size())));
    double fx = 0.0;
    try {
      const tenax::ModelGradient g = model.value_and_grad(output, inputs);
      const std::vector<double> flat = tenax::Model::flatten(g.grads);
      for (Eigen::Index k = 0; k < grad.size(); ++k) grad[k] = scale * flat[size_t(k)];
      fx = scale * tenax::to(g.value, tenax::Device::cpu()).item();  // the value may be on a device
    } catch (const tenax::NumericError& e) {
      ++result.failed_points;  // infinitely bad: the backtracking line search shortens its step
      last_failure = e.what();
      grad.setZero();
      return std::numeric_limits<double>::infinity();
    }
    if (fx < best_fx) {
      best_fx = fx;
      best = u;
    }
    return fx;
  };
  int iteration = 0;
  g_iteration_done = [&](double fx, double gnorm) {
    ++iteration;
    if (progress) progress({iteration, fx, gnorm, since()});
  };
  LBFGSpp::LBFGSParam<double> param;
  param.epsilon = options.gradient_tolerance;
  param.epsilon_rel = 0.0;
  param.max_iterations = options.max_iterations;
  param.past = 3;
  param.delta = 1e-12;
  param.max_linesearch = 40;
  LBFGSpp::LBFGSSolver<double, ReportingLineSearch> solver(param);
  Eigen::VectorXd u = best;
  double fx = 0.0;
  try {
    result.iterations = solver.minimize(objective, u, fx);
    result.converged = result.iterations < options.max_iterations;
    result.reason = result.converged ? "the gradient norm or the objective's change fell below its tolerance"
                                     : "the iteration limit (" + std::to_string(options.max_iterations) +
                                           ") was reached";
  } catch (const tenax::Error&) {
    g_iteration_done = nullptr;
    throw;  // a problem of the model or its inputs, not of the optimisation
  } catch (const std::exception& e) {  // LBFGSpp giving up: no descent direction, line search failed
    result.iterations = iteration;
    result.converged = false;
    result.reason = std::string("L-BFGS stopped: ") + e.what();
  }
  g_iteration_done = nullptr;
  if (!std::isfinite(best_fx)) {  // even the start failed: its zero "gradient" is no optimum
    result.converged = false;
    result.reason = "no point could be evaluated: " + last_failure;
  }
  model.set_unconstrained_vector(std::span<const double>(best.data(), size_t(best.size())));
  result.objective = best_fx;
  result.seconds = since();
  return result;
}

}  // namespace example
