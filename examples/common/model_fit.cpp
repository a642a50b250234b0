// L-BFGS over a model's unconstrained coordinates. LBFGSpp has no per-iteration callback: a
// line search wrapping its backtracking search reports each accepted point.
#include "model_fit.h"

#include <chrono>
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
  auto objective = [&](const Eigen::VectorXd& u, Eigen::VectorXd& grad) {
    ++result.evaluations;
    model.set_unconstrained_vector(std::span<const double>(u.data(), size_t(u.size())));
    const tenax::ModelGradient g = model.value_and_grad(output, inputs);
    const std::vector<double> flat = tenax::Model::flatten(g.grads);
    for (Eigen::Index k = 0; k < grad.size(); ++k) grad[k] = scale * flat[size_t(k)];
    return scale * tenax::to(g.value, tenax::Device::cpu()).item();  // the value may be on a device
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
  const std::vector<double> u0 = model.unconstrained_vector();
  Eigen::VectorXd u = Eigen::Map<const Eigen::VectorXd>(u0.data(), Eigen::Index(u0.size()));
  double fx = 0.0;
  try {
    result.iterations = solver.minimize(objective, u, fx);
  } catch (...) {
    g_iteration_done = nullptr;
    throw;
  }
  g_iteration_done = nullptr;
  model.set_unconstrained_vector(std::span<const double>(u.data(), size_t(u.size())));
  result.objective = fx;
  result.seconds = since();
  return result;
}

}  // namespace example
