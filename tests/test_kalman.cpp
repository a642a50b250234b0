// The Kalman flagship end to end: simulated data, L-BFGS fit, recovery of the true parameters.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "expect_message.h"
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

// The observed information from differences of the exact gradient agrees with second differences
// of the log-likelihood's values (an independent route), and the standard errors of the
// constrained values follow the delta method's closed form where there is one: r = softplus(u),
// so se(r) = sigmoid(u) se(u).
TEST(KalmanUncertainty, InformationMatchesSecondDifferencesAndTheDeltaMethod) {
  const int64_t T = 300;
  const Model truth = kalman_model(1, T);
  const TensorMap in = {{"y", kalman::simulate(truth, 1, T, 11).y}};
  Model m = truth;
  (void)kalman::fit(m, in, {300, 1e-8});
  const kalman::Uncertainty u = kalman::uncertainty(m, in);
  ASSERT_FALSE(u.near_singular) << "condition " << u.condition;
  const std::vector<double> u0 = m.unconstrained_vector();
  const size_t n = u0.size();
  auto loglik = [&](std::vector<double> at) {
    m.set_unconstrained_vector(at);
    return m.run("loglik", in).item();
  };
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const double hi = 1e-3 * (1 + std::abs(u0[i])), hj = 1e-3 * (1 + std::abs(u0[j]));
      auto at = [&](double si, double sj) {
        std::vector<double> v = u0;
        v[i] += si * hi;
        v[j] += sj * hj;
        return loglik(v);
      };
      const double second = (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * hi * hj);
      worst = std::max(worst, std::abs(-second - u.information[i * n + j]));
      largest = std::max(largest, std::abs(u.information[i * n + j]));
    }
  m.set_unconstrained_vector(u0);
  EXPECT_LT(worst, 1e-5 * largest) << "largest information entry " << largest;
  // r is the last trainable parameter (F, Q, r in name order): its two coordinates come last.
  ASSERT_EQ(m.trainable().back(), "r");
  for (size_t k = n - 2; k < n; ++k) {
    const double sigmoid = 1.0 / (1.0 + std::exp(-u0[k]));
    EXPECT_NEAR(u.se[k], sigmoid * u.se_unconstrained[k], 1e-6 * u.se[k]);
  }
}

// The Nile's annual flow (examples/nile): the local level model fitted by exact diffuse maximum
// likelihood reproduces the published figures:
// - Durbin and Koopman (2012, section 2.10.3): sigma^2_epsilon = 15099, sigma^2_eta = 1469.1, each
//   within one unit of its last printed digit;
// - the statespacer vignette on CRAN ("Introduction to statespacer", the same model, data and
//   diffuse likelihood; optim minimises -loglik / n): "initial value 6.623273" at both variances
//   var(y) and "final value 6.334646" at the optimum, to the printed digits.
// The standard errors are compared with statsmodels 0.15.0 on the same data (UnobservedComponents
// 'local level', use_exact_diffuse=True, cov_type='approx', the numerical observed information:
// 3145.548, 1280.375; its llf -633.4645636 at 15098.519, 1469.176).
TEST(NileLocalLevel, ReproducesThePublishedMaximumLikelihoodTable) {
  const std::filesystem::path file = std::filesystem::path(TENAX_SOURCE_DIR) / "examples" / "nile" / "model.json";
  Model m = load_model(file);
  const Tensor y = m.input("y");
  const TensorMap in = {{"y", y}, {"observed", kalman::observed_mask(y)}};
  {  // the vignette's start: both variances var(y) (the sample variance)
    const std::vector<double> v = y.to_vector();
    double mean = 0, var = 0;
    for (double x : v) mean += x / double(v.size());
    for (double x : v) var += (x - mean) * (x - mean) / double(v.size() - 1);
    Model start = m;
    start.set_parameter("r", tensor(std::vector<double>{var}, Axes{{"obs", 1}}));
    start.set_parameter("Q", tensor(std::vector<double>{var}, Axes{{"state", 1}, {"state2", 1}}));
    EXPECT_NEAR(-start.run("loglik", in).item() / 100.0, 6.623273, 5e-7);
  }
  const kalman::FitResult fit = kalman::fit(m, in, {});
  ASSERT_TRUE(fit.converged) << fit.reason;
  const double r = m.parameter("r").item(), q = m.parameter("Q").item();
  EXPECT_NEAR(r, 15099.0, 1.0);
  EXPECT_NEAR(q, 1469.1, 0.1);
  EXPECT_NEAR(-fit.loglik / 100.0, 6.334646, 5e-7);
  EXPECT_NEAR(fit.loglik, -633.4645636, 1e-6);
  const kalman::Uncertainty u = kalman::uncertainty(m, in);
  ASSERT_FALSE(u.near_singular);
  ASSERT_EQ(u.se.size(), 2u);  // Q, then r (file order)
  EXPECT_NEAR(u.se[0], 1280.375, 0.01 * 1280.375 * 1e-2);
  EXPECT_NEAR(u.se[1], 3145.548, 0.01 * 3145.548 * 1e-2);
}

// With the default positive constraint (softplus, u ~ value for a variance of 15000), the fit moves
// such parameters through the log of their value: it stopped 7.5% short of the optimum when the
// gradient tolerance was applied to u.
TEST(NileLocalLevel, SoftplusVariancesReachTheSameOptimum) {
  const std::filesystem::path file = std::filesystem::path(TENAX_SOURCE_DIR) / "examples" / "nile" / "model.json";
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(file));
  doc["parameters"]["Q"]["constraint"] = "positive";
  doc["parameters"]["r"]["constraint"] = "positive";
  Model m = load_model_json(doc, file.parent_path());
  ASSERT_EQ(m.constraint("r"), "positive (softplus)");
  const Tensor y = m.input("y");
  const kalman::FitResult fit = kalman::fit(m, {{"y", y}, {"observed", kalman::observed_mask(y)}}, {});
  ASSERT_TRUE(fit.converged) << fit.reason;
  EXPECT_NEAR(m.parameter("r").item(), 15098.52, 1.0);
  EXPECT_NEAR(m.parameter("Q").item(), 1469.18, 0.1);
  EXPECT_NEAR(fit.loglik, -633.4645636, 1e-6);
}

// A file with these contents in the test's temporary folder.
std::string file_with(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / ("tenax_kalman_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

std::string csv_error(const std::string& text) {
  try {
    (void)kalman::read_csv_observations(file_with("obs.csv", text), 2);
  } catch (const Error& e) {
    const std::string m = e.what();
    return m.substr(m.find("obs.csv"));
  }
  return "(no error)";
}

TEST(KalmanCsv, ReadsRowsWithAHeaderAndTrailingBlankLines) {
  const Tensor y = kalman::read_csv_observations(file_with("good.csv", "y1, y2\r\n1,2\r\n3 , -4.5\n5,6e-1\n\n\n"), 2);
  EXPECT_EQ(y.axes().describe(), "(series=1, time=3, obs=2)");
  EXPECT_EQ(y.to_vector(), (std::vector<double>{1, 2, 3, -4.5, 5, 0.6}));
}

TEST(KalmanCsv, NeverDropsOrShiftsARowSilently) {
  // A blank line in the data was skipped ("read 99 observations"); every non-numeric row before the
  // first numeric one was a "header"; errors had no line numbers or were off by one.
  EXPECT_EQ(csv_error("1,2\n\n3,4\n5,6\n"), "obs.csv line 2: a blank line between observations (time steps would shift)");
  const std::string no_mask = "; this model has no input 'observed' to mark missing observations";
  EXPECT_EQ(csv_error("NA,1.5\n1,2\n3,4\n"), "obs.csv line 1 column 1: a missing value ('NA')" + no_mask);
  EXPECT_EQ(csv_error("y1,y2\nz1,z2\n1,2\n"), "obs.csv line 2 column 1: 'z1' is not a number (cells are separated by commas)");
  EXPECT_EQ(csv_error("1,2\n3,\n"), "obs.csv line 2 column 2: a missing value (the line ends with a comma)" + no_mask);
  EXPECT_EQ(csv_error("1,2\n,3\n"), "obs.csv line 2 column 1: a missing value ('')" + no_mask);
  EXPECT_EQ(csv_error("1,2\n3,nan\n"), "obs.csv line 2 column 2: a missing value ('nan')" + no_mask);
  EXPECT_EQ(csv_error("1,2\n3,inf\n"), "obs.csv line 2 column 2: a non-finite value ('inf')");
  EXPECT_EQ(csv_error("1,2\n3\n"), "obs.csv line 2: expected 2 comma-separated values (one per observation), got 1");
  EXPECT_EQ(csv_error("1;2\n3;4\n"), "obs.csv line 1 column 1: '1;2' is not a number (cells are separated by commas)");
  EXPECT_EQ(csv_error(std::string("1,2\n\x01\x02\n", 7)), "obs.csv line 2: binary data (byte 1), not a CSV of observations");
  EXPECT_EQ(csv_error("y1,y2\n1,2\n"), "obs.csv: needs at least 2 lines of observations, found 1");
}

// Two observations of a two-state model are degenerate: L-BFGS gives up on most seeds ("the moving
// direction increases the objective function value"), which escaped as an exception and aborted
// the program. The fit now says it did not converge and leaves the model at its best point.
// Where the model marks missing observations, empty, NA and nan cells are NaN in place (the first
// line "NA,1.5" is data, not a header), and observed_mask marks them; series whose gaps differ
// are refused.
TEST(KalmanCsv, MissingValuesAreReadInPlaceWhereTheModelMarksThem) {
  const Tensor y = kalman::read_csv_observations(file_with("gaps.csv", "NA,1.5\n1,\n,nan\n4, 5\n"), 2, true);
  EXPECT_EQ(y.axes().describe(), "(series=1, time=4, obs=2)");
  const std::vector<double> v = y.to_vector();
  const std::vector<bool> gap = {true, false, false, true, true, true, false, false};
  for (size_t k = 0; k < v.size(); ++k) EXPECT_EQ(std::isnan(v[k]), gap[k]) << k;
  EXPECT_EQ(v[1], 1.5);
  EXPECT_EQ(v[7], 5.0);
  EXPECT_EQ(kalman::observed_mask(y).to_vector(), (std::vector<double>{0, 1, 1, 0, 0, 0, 1, 1}));
  EXPECT_THROW((void)kalman::read_csv_observations(file_with("allgaps.csv", "NA,NA\n,\n"), 2, true), Error);
  const Tensor two = concat({y, tensor(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, y.axes())}, "series");
  EXPECT_MESSAGE(tenax::testing::error_message<Error>([&] { (void)kalman::observed_mask(two); }),
                 "series 1 has its missing observations elsewhere than series 0 (time 0, observation 0)");
}

TEST(KalmanFit, GivingUpOrRunningOutOfIterationsIsAResultNotAnAbort) {
  const Model truth = kalman_model(1, 2);
  int gave_up = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const TensorMap in = {{"y", kalman::simulate(truth, 1, 2, seed).y}};
    Model m = truth;
    m.set_unconstrained_vector(std::vector<double>(truth.unconstrained_vector().size(), 0.0));
    const double start = m.run("loglik", in).item();
    const kalman::FitResult r = kalman::fit(m, in, {200, 1e-6});
    gave_up += r.reason.rfind("L-BFGS stopped: ", 0) == 0;
    EXPECT_FALSE(r.reason.empty());
    EXPECT_GE(r.loglik, start);                        // never worse than where it started
    EXPECT_EQ(m.run("loglik", in).item(), r.loglik);   // and the model is left at that point
  }
  EXPECT_GT(gave_up, 0);
  const Model longer = kalman_model(1, 200);
  const TensorMap in = {{"y", kalman::simulate(longer, 1, 200, 3).y}};
  Model m = longer;
  m.set_unconstrained_vector(std::vector<double>(longer.unconstrained_vector().size(), 0.0));
  const kalman::FitResult r = kalman::fit(m, in, {3, 1e-6});
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.reason, "the iteration limit (3) was reached");
}

// A trial point where the filter's Cholesky fails counts as infinitely bad: the line search backs
// off instead of the whole fit aborting; a start that fails is reported, not taken as an optimum.
TEST(KalmanFit, AFailingPointMakesTheLineSearchBackOff) {
  nlohmann::json doc = kalman::default_model();
  doc["axes"]["series"] = 1;
  doc["axes"]["time"] = 50;
  doc["parameters"]["r"]["constraint"] = "unconstrained";  // r <= 0 makes S indefinite
  Model m = load_model_json(doc);
  const TensorMap in = {{"y", kalman::simulate(m, 1, 50, 5).y}};
  const kalman::FitResult r = kalman::fit(m, in, {100, 1e-6});
  EXPECT_GT(r.failed_points, 0);  // trial points with r <= 0 were met, and the fit went on
  EXPECT_TRUE(std::isfinite(r.loglik));
  EXPECT_GE(r.loglik, Model(load_model_json(doc)).run("loglik", in).item());
  // From a start where r is negative the filter fails at once.
  Model bad = load_model_json(doc);
  bad.set_parameter("r", tensor({-1.0, -1.0}, "obs"));
  const kalman::FitResult failed = kalman::fit(bad, in, {100, 1e-6});
  EXPECT_FALSE(failed.converged);
  EXPECT_EQ(failed.reason.rfind("no point could be evaluated: ", 0), 0u) << failed.reason;
  EXPECT_GT(failed.failed_points, 0);
}

}  // namespace
