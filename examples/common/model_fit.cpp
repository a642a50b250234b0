// L-BFGS over a model's unconstrained coordinates. LBFGSpp has no per-iteration callback: a
// line search wrapping its backtracking search reports each accepted point.
#include "model_fit.h"

#include <algorithm>
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

// The coordinates L-BFGS works in. A softplus-positive parameter is seen through the log of its
// value: softplus(u) ~ u for large u, so a variance of 15000 would otherwise sit where a unit step
// of u is a relative change of 1e-4 and the gradient tolerance stops the fit short of the optimum
// (7.5% off on the Nile series). log(value) is scale-free; every other coordinate is the model's.
struct Coordinates {
  std::vector<bool> log_softplus;  // per flat coordinate

  explicit Coordinates(const tenax::Model& model) {
    for (const std::string& name : model.trainable()) {
      const bool s = model.constraint(name) == "positive (softplus)";
      log_softplus.insert(log_softplus.end(), size_t(model.unconstrained(name).numel()), s);
    }
  }
  // z -> u; false when a coordinate cannot be represented (its value under- or overflows).
  bool to_model(const Eigen::VectorXd& z, std::vector<double>& u) const {
    u.assign(z.data(), z.data() + z.size());
    for (size_t k = 0; k < u.size(); ++k)
      if (log_softplus[k]) {
        const double x = std::exp(z[Eigen::Index(k)]);  // softplus^-1(x) = x + log(-expm1(-x))
        u[k] = x + std::log(-std::expm1(-x));
      }
    return std::all_of(u.begin(), u.end(), [](double v) { return std::isfinite(v); });
  }
  Eigen::VectorXd from_model(const std::vector<double>& u) const {
    Eigen::VectorXd z(Eigen::Index(u.size()));
    for (size_t k = 0; k < u.size(); ++k)
      z[Eigen::Index(k)] = log_softplus[k] ? std::log(u[k] > 0 ? u[k] + std::log1p(std::exp(-u[k]))
                                                                : std::log1p(std::exp(u[k])))
                                           : u[k];
    return z;
  }
  // d u_k / d z_k (1 for the model's own coordinates): x / (1 - exp(-x)) with x = exp(z).
  double du_dz(const Eigen::VectorXd& z, size_t k) const {
    if (!log_softplus[k]) return 1.0;
    const double x = std::exp(z[Eigen::Index(k)]);
    return x / -std::expm1(-x);
  }
};

}  // namespace

FitResult minimize(tenax::Model& model, const std::string& output, const tenax::TensorMap& inputs,
                   double scale, const FitOptions& options,
                   const std::function<void(const Progress&)>& progress) {
  const auto start = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  FitResult result;
  const Coordinates coords(model);
  // The best point evaluated: where the fit ends if L-BFGS gives up half-way through a line search.
  Eigen::VectorXd best = coords.from_model(model.unconstrained_vector());
  double best_fx = std::numeric_limits<double>::infinity();
  std::string last_failure;
  std::vector<double> u;
  auto objective = [&](const Eigen::VectorXd& z, Eigen::VectorXd& grad) {
    ++result.evaluations;
    double fx = 0.0;
    try {  // a coordinate its constraint cannot map (softplus underflowing to 0) fails like the filter
      if (!coords.to_model(z, u)) throw tenax::NumericError("a coordinate under- or overflows its constraint");
      model.set_unconstrained_vector(u);
      const tenax::ModelGradient g = model.value_and_grad(output, inputs);
      const std::vector<double> flat = tenax::Model::flatten(g.grads);
      for (Eigen::Index k = 0; k < grad.size(); ++k) grad[k] = scale * flat[size_t(k)] * coords.du_dz(z, size_t(k));
      fx = scale * tenax::to(g.value, tenax::Device::cpu()).item();  // the value may be on a device
    } catch (const tenax::NumericError& e) {
      ++result.failed_points;  // infinitely bad: the backtracking line search shortens its step
      last_failure = e.what();
      grad.setZero();
      return std::numeric_limits<double>::infinity();
    }
    if (fx < best_fx) {
      best_fx = fx;
      best = z;
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
  Eigen::VectorXd z = best;
  double fx = 0.0;
  try {
    result.iterations = solver.minimize(objective, z, fx);
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
  if (coords.to_model(best, u)) model.set_unconstrained_vector(u);
  result.objective = best_fx;
  result.seconds = since();
  return result;
}

}  // namespace example
