// The Kalman flagship end to end: simulated data, L-BFGS fit, recovery of the true parameters.
#include <cmath>

#include <gtest/gtest.h>

#include "kalman.h"

namespace {

using namespace tenax;

Model kalman_model(int64_t series, int64_t steps) {
  nlohmann::json doc = kalman::default_model();
  doc["axes"]["series"] = series;
  doc["axes"]["time"] = steps;
  return load_model_json(doc);
}

// On T = 2000 steps the maximum-likelihood estimate lies within 4 standard errors of the truth in
// every identified unconstrained coordinate. The standard errors come from the observed information
// at the optimum (finite differences of the reverse-mode gradient); for a correct estimator a
// deviation beyond 4 SE has probability about 6e-5 per coordinate, and the seed is fixed, so the
// test is deterministic and fails only if the likelihood, its gradient or the optimiser is wrong.
TEST(Kalman, FitRecoversTheTrueParametersWithinStatisticalError) {
  const int64_t T = 2000;
  const Model truth = kalman_model(1, T);
  const kalman::Simulation sim = kalman::simulate(truth, 1, T, 2026);
  const TensorMap in = {{"y", sim.y}};
  Model m = truth;
  m.set_unconstrained_vector(std::vector<double>(truth.unconstrained_vector().size(), 0.0));
  int reported = 0;
  const kalman::FitResult r = kalman::fit(m, in, {300, 1e-7}, [&](const kalman::Progress& p) {
    EXPECT_EQ(p.iteration, ++reported);
  });
  EXPECT_GT(r.iterations, 5);
  EXPECT_EQ(reported, r.iterations);
  // The optimum is at least as likely as the truth, and the gradient vanishes there.
  EXPECT_GE(r.loglik, truth.run("loglik", in).item());
  const std::vector<double> g = Model::flatten(m.value_and_grad("loglik", in).grads);
  for (double gk : g) EXPECT_LT(std::abs(gk) / double(T), 1e-5);

  const std::vector<double> se = kalman::standard_errors(m, in);
  const std::vector<double> fitted = m.unconstrained_vector(), want = truth.unconstrained_vector();
  int identified = 0;
  for (size_t k = 0; k < fitted.size(); ++k) {
    if (se[k] == 0.0) continue;  // the unused upper triangle of Q's factor
    ++identified;
    EXPECT_LT(std::abs(fitted[k] - want[k]), 4.0 * se[k])
        << "coordinate " << k << ": fitted " << fitted[k] << " true " << want[k] << " se " << se[k];
    EXPECT_LT(se[k], 0.2) << "coordinate " << k << " is barely identified";
  }
  EXPECT_EQ(identified, 4 + 3 + 2);  // F, the lower triangle of Q's factor, r
}

}  // namespace
