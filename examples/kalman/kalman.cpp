// Simulation and L-BFGS fitting for the Kalman example.
#include "kalman.h"

#include <chrono>
#include <cmath>
#include <random>

#include <Eigen/Dense>
#include <LBFGS.h>

namespace kalman {
namespace {

using tenax::Tensor;
using Clock = std::chrono::steady_clock;

// The progress hook of the line search below (the solver exposes no per-iteration callback).
thread_local std::function<void(double fx, double gnorm)> g_iteration_done;

// LBFGSpp's backtracking line search, reporting each accepted point: one call per iteration.
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

Simulation simulate(const tenax::Model& model, int64_t series, int64_t steps, uint64_t seed) {
  const tenax::Axes& ax = model.axes();
  const int64_t n = ax.size_of("state"), p = ax.size_of("obs");
  const std::vector<double> F = model.parameter("F").to_vector({"state", "state2"});
  const std::vector<double> H = model.parameter("H").to_vector({"obs", "state"});
  const std::vector<double> r = model.parameter("r").to_vector();
  const std::vector<double> m0 = model.parameter("m0").to_vector();
  // Lower Cholesky factors of Q and P0 (row-major over (state, state2)) for the noise.
  auto factor = [&](const char* name) {
    return tenax::cholesky(model.parameter(name), "state", "state2").to_vector({"state", "state2"});
  };
  const std::vector<double> lq = factor("Q"), l0 = factor("P0");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  std::vector<double> ys, xs;
  ys.reserve(size_t(series * steps * p));
  xs.reserve(size_t(series * steps * n));
  std::vector<double> x(static_cast<size_t>(n)), e(static_cast<size_t>(n)), fx(static_cast<size_t>(n));
  for (int64_t s = 0; s < series; ++s) {
    // x_0 ~ N(m0, P0); the first observation is of x_1 = F x_0 + w_1, as the filter assumes.
    for (int64_t i = 0; i < n; ++i) e[size_t(i)] = z(rng);
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = m0[size_t(i)];
      for (int64_t k = 0; k <= i; ++k) x[size_t(i)] += l0[size_t(i * n + k)] * e[size_t(k)];
    }
    for (int64_t t = 0; t < steps; ++t) {
      for (int64_t i = 0; i < n; ++i) e[size_t(i)] = z(rng);
      for (int64_t i = 0; i < n; ++i) {
        double v = 0.0;
        for (int64_t k = 0; k < n; ++k) v += F[size_t(i * n + k)] * x[size_t(k)];
        for (int64_t k = 0; k <= i; ++k) v += lq[size_t(i * n + k)] * e[size_t(k)];
        fx[size_t(i)] = v;
      }
      x = fx;
      xs.insert(xs.end(), x.begin(), x.end());
      for (int64_t o = 0; o < p; ++o) {
        double v = std::sqrt(r[size_t(o)]) * z(rng);
        for (int64_t k = 0; k < n; ++k) v += H[size_t(o * n + k)] * x[size_t(k)];
        ys.push_back(v);
      }
    }
  }
  return {tenax::tensor(ys, tenax::Axes{{"series", series}, {"time", steps}, {"obs", p}}),
          tenax::tensor(xs, tenax::Axes{{"series", series}, {"time", steps}, {"state", n}})};
}

FitResult fit(tenax::Model& model, const tenax::TensorMap& inputs, const FitOptions& options,
              const std::function<void(const Progress&)>& progress) {
  const double count = double(inputs.at("y").numel());
  const auto start = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  FitResult result;
  // L-BFGS minimises -loglik / observations: a scale independent of the data's length.
  auto objective = [&](const Eigen::VectorXd& u, Eigen::VectorXd& grad) {
    ++result.evaluations;
    model.set_unconstrained_vector(std::span<const double>(u.data(), size_t(u.size())));
    const tenax::ModelGradient g = model.value_and_grad("loglik", inputs);
    const std::vector<double> flat = tenax::Model::flatten(g.grads);
    for (Eigen::Index k = 0; k < grad.size(); ++k) grad[k] = -flat[size_t(k)] / count;
    return -g.value.item() / count;
  };
  int iteration = 0;
  g_iteration_done = [&](double fx, double gnorm) {
    ++iteration;
    if (progress) progress({iteration, -fx * count, gnorm, since()});
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
  result.loglik = -fx * count;
  result.seconds = since();
  return result;
}

std::vector<double> standard_errors(tenax::Model& model, const tenax::TensorMap& inputs) {
  const std::vector<double> u0 = model.unconstrained_vector();
  const size_t n = u0.size();
  auto gradient = [&](const std::vector<double>& u) {
    model.set_unconstrained_vector(u);
    return tenax::Model::flatten(model.value_and_grad("loglik", inputs).grads);
  };
  Eigen::MatrixXd info(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n));
  for (size_t j = 0; j < n; ++j) {
    const double h = 1e-5 * (1.0 + std::abs(u0[j]));
    std::vector<double> up = u0, dn = u0;
    up[j] += h;
    dn[j] -= h;
    const std::vector<double> gp = gradient(up), gm = gradient(dn);
    for (size_t i = 0; i < n; ++i) info(Eigen::Index(i), Eigen::Index(j)) = -(gp[i] - gm[i]) / (2 * h);
  }
  model.set_unconstrained_vector(u0);
  info = 0.5 * (info + info.transpose()).eval();
  // Coordinates the likelihood ignores have a zero row: leave them out of the inverse.
  std::vector<Eigen::Index> active;
  for (size_t i = 0; i < n; ++i)
    if (info.row(Eigen::Index(i)).cwiseAbs().maxCoeff() > 1e-8) active.push_back(Eigen::Index(i));
  Eigen::MatrixXd sub(static_cast<Eigen::Index>(active.size()), static_cast<Eigen::Index>(active.size()));
  for (size_t a = 0; a < active.size(); ++a)
    for (size_t b = 0; b < active.size(); ++b) sub(Eigen::Index(a), Eigen::Index(b)) = info(active[a], active[b]);
  const Eigen::MatrixXd cov = sub.inverse();
  std::vector<double> se(n, 0.0);
  for (size_t a = 0; a < active.size(); ++a) se[size_t(active[a])] = std::sqrt(std::max(cov(Eigen::Index(a), Eigen::Index(a)), 0.0));
  return se;
}

}  // namespace kalman
