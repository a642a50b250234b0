// The Kalman example model's state-space outputs (examples/kalman/model.json) against one dense
// joint-Gaussian computation written here: the log-likelihood of the observed values with gaps,
// the filtered and smoothed states, and the forecasts, each a conditional of one covariance matrix
// built from the model's definition (no recursion shared with the filter).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tenax/tenax.h"

namespace {

using namespace tenax;
using json = nlohmann::json;
namespace fs = std::filesystem;
using Vec = std::vector<double>;

const fs::path kModel = fs::path(TENAX_SOURCE_DIR) / "examples" / "kalman" / "model.json";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Model kalman(int series, int T, int horizon) {
  std::ifstream in(kModel);
  json doc = json::parse(in);
  doc["axes"]["series"] = series;
  doc["axes"]["time"] = T;
  doc["axes"]["horizon"] = horizon;
  return load_model_json(doc, kModel.parent_path());
}

// ---- dense linear algebra on row-major matrices ----
struct Mat {
  int r = 0, c = 0;
  Vec a;
  Mat(int rows, int cols) : r(rows), c(cols), a(size_t(rows * cols), 0.0) {}
  double& operator()(int i, int j) { return a[size_t(i * c + j)]; }
  double operator()(int i, int j) const { return a[size_t(i * c + j)]; }
};
Mat mul(const Mat& x, const Mat& y) {
  Mat o(x.r, y.c);
  for (int i = 0; i < x.r; ++i)
    for (int k = 0; k < x.c; ++k)
      for (int j = 0; j < y.c; ++j) o(i, j) += x(i, k) * y(k, j);
  return o;
}
Mat tr(const Mat& x) {
  Mat o(x.c, x.r);
  for (int i = 0; i < x.r; ++i)
    for (int j = 0; j < x.c; ++j) o(j, i) = x(i, j);
  return o;
}
Mat add(Mat x, const Mat& y, double s = 1.0) {
  for (size_t k = 0; k < x.a.size(); ++k) x.a[k] += s * y.a[k];
  return x;
}
Mat eye(int n) {
  Mat o(n, n);
  for (int i = 0; i < n; ++i) o(i, i) = 1.0;
  return o;
}
Mat from(const Tensor& t, int r, int c, const std::vector<std::string>& order) {
  Mat o(r, c);
  AxisList names;
  for (const std::string& n : order) names.push_back(Name(n));
  o.a = t.to_vector(names);
  return o;
}
// L with L L^T = a (Cholesky), then solves with it.
Mat cholesky(const Mat& a) {
  Mat l(a.r, a.r);
  for (int j = 0; j < a.r; ++j) {
    double d = a(j, j);
    for (int k = 0; k < j; ++k) d -= l(j, k) * l(j, k);
    l(j, j) = std::sqrt(d);
    for (int i = j + 1; i < a.r; ++i) {
      double s = a(i, j);
      for (int k = 0; k < j; ++k) s -= l(i, k) * l(j, k);
      l(i, j) = s / l(j, j);
    }
  }
  return l;
}
// a^{-1} b for SPD a.
Mat spd_solve(const Mat& a, Mat b) {
  const Mat l = cholesky(a);
  for (int col = 0; col < b.c; ++col) {
    for (int i = 0; i < a.r; ++i) {
      double s = b(i, col);
      for (int k = 0; k < i; ++k) s -= l(i, k) * b(k, col);
      b(i, col) = s / l(i, i);
    }
    for (int i = a.r - 1; i >= 0; --i) {
      double s = b(i, col);
      for (int k = i + 1; k < a.r; ++k) s -= l(k, i) * b(k, col);
      b(i, col) = s / l(i, i);
    }
  }
  return b;
}

// The model x_t = F x_{t-1} + w_t (t = 1..T+h), y_t = H x_t + v_t, x_0 ~ N(m0, P0) as one
// Gaussian: means and covariances of every x_t and y_t (t = 1..T+h) by their definitions.
struct Joint {
  int n, p, steps;
  std::vector<Mat> mean_x;               // E x_t
  std::vector<std::vector<Mat>> cov_x;  // Cov(x_s, x_t)
  Mat H, R;
  Joint(const Model& m, int steps_) : n(2), p(2), steps(steps_), H(2, 2), R(2, 2) {
    const Mat F = from(m.parameter("F"), 2, 2, {"state", "state2"});
    const Mat Q = from(m.parameter("Q"), 2, 2, {"state", "state2"});
    H = from(m.parameter("H"), 2, 2, {"obs", "state"});
    const Vec r = m.parameter("r").to_vector();
    R(0, 0) = r[0];
    R(1, 1) = r[1];
    Mat mean = from(m.parameter("m0"), 2, 1, {"state"});
    Mat var = from(m.parameter("P0"), 2, 2, {"state", "state2"});
    std::vector<Mat> var_t;
    for (int t = 0; t < steps; ++t) {
      mean = mul(F, mean);
      var = add(mul(mul(F, var), tr(F)), Q);
      mean_x.push_back(mean);
      var_t.push_back(var);
    }
    cov_x.assign(size_t(steps), std::vector<Mat>(size_t(steps), Mat(2, 2)));
    for (int s = 0; s < steps; ++s) {
      Mat fk = eye(2);  // F^(t-s)
      for (int t = s; t < steps; ++t) {
        cov_x[size_t(s)][size_t(t)] = mul(var_t[size_t(s)], tr(fk));  // Cov(x_s, x_t) = Var(x_s) F^(t-s)'
        cov_x[size_t(t)][size_t(s)] = tr(cov_x[size_t(s)][size_t(t)]);
        fk = mul(F, fk);
      }
    }
  }
  // Cov(y_s[i], y_t[j]) and Cov(x_s[a], y_t[j]).
  double cyy(int s, int i, int t, int j) const {
    const Mat c = mul(mul(H, cov_x[size_t(s)][size_t(t)]), tr(H));
    return c(i, j) + (s == t ? R(i, j) : 0.0);
  }
  double cxy(int s, int a, int t, int j) const { return mul(cov_x[size_t(s)][size_t(t)], tr(H))(a, j); }
  double ey(int t, int i) const { return mul(H, mean_x[size_t(t)])(i, 0); }
};

// The observed entries (time, obs) of y up to time `upto` (exclusive): their indices.
struct Seen {
  std::vector<std::pair<int, int>> at;
};
Seen seen(const Vec& y, int p, int upto) {
  Seen s;
  for (int t = 0; t < upto; ++t)
    for (int i = 0; i < p; ++i)
      if (!std::isnan(y[size_t(t * p + i)])) s.at.emplace_back(t, i);
  return s;
}

// log N(y_seen; mean, Sigma_seen).
double dense_loglik(const Joint& g, const Vec& y, const Seen& s) {
  const int k = int(s.at.size());
  Mat sig(k, k), d(k, 1);
  for (int a = 0; a < k; ++a) {
    d(a, 0) = y[size_t(s.at[size_t(a)].first * g.p + s.at[size_t(a)].second)] -
              g.ey(s.at[size_t(a)].first, s.at[size_t(a)].second);
    for (int b = 0; b < k; ++b)
      sig(a, b) = g.cyy(s.at[size_t(a)].first, s.at[size_t(a)].second, s.at[size_t(b)].first, s.at[size_t(b)].second);
  }
  const Mat l = cholesky(sig);
  const Mat z = spd_solve(sig, d);
  double quad = 0.0, logdet = 0.0;
  for (int a = 0; a < k; ++a) {
    quad += d(a, 0) * z(a, 0);
    logdet += 2.0 * std::log(l(a, a));
  }
  return -0.5 * (quad + logdet + k * std::log(2.0 * M_PI));
}

// The exact diffuse log-likelihood by its definition, log of the integral over delta of
// p(y_seen | delta) minus (q/2) log 2 pi, where x_1 = (F m0 + w_1 + F x_0 noise) + A delta: with
// X = d E[y_seen] / d delta, M = X' Sigma^-1 X, b = X' Sigma^-1 d, it is
// log N(y; mean, Sigma) + b' M^-1 b / 2 - log|M| / 2.
double dense_diffuse_loglik(const Joint& g, const Model& m, const Vec& y, const Seen& s) {
  const int k = int(s.at.size());
  const Mat F = from(m.parameter("F"), 2, 2, {"state", "state2"});
  const Mat A = from(m.parameter("A_diffuse"), 2, 2, {"state", "diffuse"});
  std::vector<Mat> hfa;  // H F^(t) A for t = 0, 1, ...
  Mat fa = A;
  for (int t = 0; t < g.steps; ++t) {
    hfa.push_back(mul(g.H, fa));
    fa = mul(F, fa);
  }
  Mat sig(k, k), d(k, 1), X(k, 2);
  for (int a = 0; a < k; ++a) {
    const auto [ta, ia] = s.at[size_t(a)];
    d(a, 0) = y[size_t(ta * g.p + ia)] - g.ey(ta, ia);
    for (int b = 0; b < k; ++b) sig(a, b) = g.cyy(ta, ia, s.at[size_t(b)].first, s.at[size_t(b)].second);
    for (int q = 0; q < 2; ++q) X(a, q) = hfa[size_t(ta)](ia, q);
  }
  const Mat M = mul(tr(X), spd_solve(sig, X));
  const Mat b = mul(tr(X), spd_solve(sig, d));
  const Mat lm = cholesky(M);
  const double bmb = mul(tr(b), spd_solve(M, b))(0, 0);
  return dense_loglik(g, y, s) + 0.5 * bmb - std::log(lm(0, 0)) - std::log(lm(1, 1));
}

// E and Var of x_t given the seen entries.
std::pair<Mat, Mat> dense_state(const Joint& g, const Vec& y, const Seen& s, int t) {
  const int k = int(s.at.size());
  Mat sig(k, k), d(k, 1), cxs(2, k);
  for (int a = 0; a < k; ++a) {
    const auto [ta, ia] = s.at[size_t(a)];
    d(a, 0) = y[size_t(ta * g.p + ia)] - g.ey(ta, ia);
    for (int b = 0; b < k; ++b) sig(a, b) = g.cyy(ta, ia, s.at[size_t(b)].first, s.at[size_t(b)].second);
    for (int q = 0; q < 2; ++q) cxs(q, a) = g.cxy(t, q, ta, ia);
  }
  const Mat mean = add(g.mean_x[size_t(t)], mul(cxs, spd_solve(sig, d)));
  const Mat var = add(g.cov_x[size_t(t)][size_t(t)], mul(cxs, spd_solve(sig, tr(cxs))), -1.0);
  return {mean, var};
}

// Observations simulated from the model (series 1), with NaN at `gaps` (flat time * p + obs).
Vec observations(const Model& m, int T, const std::vector<int>& gaps, uint64_t seed) {
  const Joint g(m, T);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  Vec y(size_t(T * 2));
  for (double& v : y) v = 1.5 * z(rng);  // any numbers: the conditionals hold for every y
  for (int k : gaps) y[size_t(k)] = kNaN;
  return y;
}

Tensor observed_of(const Vec& y, int T) {
  Vec o(y.size());
  for (size_t k = 0; k < y.size(); ++k) o[k] = std::isnan(y[k]) ? 0.0 : 1.0;
  return tensor(o, Axes{{"time", T}, {"obs", 2}});
}

TensorMap inputs_of(const Vec& y, int T) {
  return {{"y", tensor(y, Axes{{"series", 1}, {"time", T}, {"obs", 2}})}, {"observed", observed_of(y, T)}};
}

// Every unconstrained coordinate's gradient of `output` against central differences of its values.
void expect_gradient_matches_differences(Model& m, const char* output, const TensorMap& in) {
  const std::vector<double> grad = Model::flatten(m.value_and_grad(output, in).grads);
  const std::vector<double> u = m.unconstrained_vector();
  for (size_t k = 0; k < u.size(); ++k) {
    const double h = 1e-5;
    std::vector<double> up = u, dn = u;
    up[k] += h;
    dn[k] -= h;
    m.set_unconstrained_vector(up);
    const double fp = m.run(output, in).item();
    m.set_unconstrained_vector(dn);
    const double fm = m.run(output, in).item();
    m.set_unconstrained_vector(u);
    EXPECT_NEAR(grad[k], (fp - fm) / (2 * h), 1e-7 * (1.0 + std::abs(grad[k]))) << output << " coordinate " << k;
  }
}

// A step with both observations missing, one with only the second, and the last step partial.
const std::vector<int> kGaps = {2 * 2 + 0, 2 * 2 + 1, 4 * 2 + 1, 5 * 2 + 0, 6 * 2 + 0, 6 * 2 + 1, 7 * 2 + 1};

TEST(StateSpace, LoglikWithGapsIsTheDensityOfWhatWasObserved) {
  const int T = 8;
  Model m = kalman(1, T, 3);
  const Vec y = observations(m, T, kGaps, 1);
  const double want = dense_loglik(Joint(m, T), y, seen(y, 2, T));
  EXPECT_NEAR(m.run("loglik", inputs_of(y, T)).item(), want, 1e-12 * std::abs(want));
  // A NaN that `observed` does not mark is not read as anything: the likelihood is NaN.
  EXPECT_TRUE(std::isnan(m.run("loglik", {{"y", tensor(y, Axes{{"series", 1}, {"time", T}, {"obs", 2}})}}).item()));
  // Without gaps the same (the mask all ones, the default).
  const Vec full = observations(m, T, {}, 2);
  const double want_full = dense_loglik(Joint(m, T), full, seen(full, 2, T));
  EXPECT_NEAR(m.run("loglik", {{"y", tensor(full, Axes{{"series", 1}, {"time", T}, {"obs", 2}})}}).item(), want_full,
              1e-12 * std::abs(want_full));
}

TEST(StateSpace, DiffuseLoglikIsTheIntegralOverTheDiffuseStart) {
  const int T = 8;
  Model m = kalman(1, T, 3);
  for (const std::vector<int>& gaps : {std::vector<int>{}, kGaps}) {
    const Vec y = observations(m, T, gaps, 7);
    const double want = dense_diffuse_loglik(Joint(m, T), m, y, seen(y, 2, T));
    EXPECT_NEAR(m.run("loglik_diffuse", inputs_of(y, T)).item(), want, 1e-11 * std::abs(want));
  }
  // One diffuse direction: the definition's limit, loglik + (q/2) log kappa as x_1's variance
  // along A grows as kappa, approached through P0 (x_1 = F x_0 + w_1, so P0 += kappa F^-1 a a' F^-T).
  json doc = json::parse(std::ifstream(kModel));
  doc["axes"]["series"] = 1;
  doc["axes"]["time"] = T;
  doc["axes"]["diffuse"] = 1;
  doc["axes"]["diffuse2"] = 1;
  doc["parameters"]["A_diffuse"] = {{"axes", {"state", "diffuse"}}, {"value", {{1.0}, {2.0}}}, {"trainable", false}};
  const Model one = load_model_json(doc, kModel.parent_path());
  const Vec y = observations(one, T, kGaps, 8);
  const double exact = one.run("loglik_diffuse", inputs_of(y, T)).item();
  const Mat F = from(one.parameter("F"), 2, 2, {"state", "state2"});
  const double det = F(0, 0) * F(1, 1) - F(0, 1) * F(1, 0);
  const Vec fa = {(F(1, 1) * 1.0 - F(0, 1) * 2.0) / det, (-F(1, 0) * 1.0 + F(0, 0) * 2.0) / det};  // F^-1 a
  double previous_gap = 1e300;
  for (const double kappa : {1e4, 1e6, 1e8}) {
    Model big = one;
    Vec p0 = big.parameter("P0").to_vector({"state", "state2"});
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) p0[size_t(i * 2 + j)] += kappa * fa[size_t(i)] * fa[size_t(j)];
    big.set_parameter("P0", tensor(p0, Axes{{"state", 2}, {"state2", 2}}));
    const double gap = std::abs(big.run("loglik", inputs_of(y, T)).item() + 0.5 * std::log(kappa) - exact);
    EXPECT_LT(gap, 0.2 * previous_gap) << "kappa " << kappa;  // O(1/kappa)
    previous_gap = gap;
  }
  EXPECT_LT(previous_gap, 1e-6);
}

TEST(StateSpace, GradientWithGapsMatchesFiniteDifferences) {
  const int T = 8;
  Model m = kalman(1, T, 3);
  const TensorMap in = inputs_of(observations(m, T, kGaps, 3), T);
  for (const char* output : {"loglik", "loglik_diffuse"}) expect_gradient_matches_differences(m, output, in);
}

TEST(StateSpace, FilteredAndSmoothedStatesAreTheDenseConditionals) {
  const int T = 8;
  Model m = kalman(1, T, 3);
  const Vec y = observations(m, T, kGaps, 4);
  const TensorMap out = m.run(inputs_of(y, T));
  const Joint g(m, T);
  const Seen all = seen(y, 2, T);
  for (int t = 0; t < T; ++t) {
    const auto [ms, vs] = dense_state(g, y, all, t);
    const auto [mf, vf] = dense_state(g, y, seen(y, 2, t + 1), t);
    const Vec sm = select(select(out.at("smoothed"), "series", 0), "time", t).to_vector({"state"});
    const Vec sv = select(select(out.at("smoothed_var"), "series", 0), "time", t).to_vector({"state", "state2"});
    const Vec fm = select(select(out.at("filtered"), "series", 0), "time", t).to_vector({"state"});
    const Vec fv = select(select(out.at("filtered_var"), "series", 0), "time", t).to_vector({"state", "state2"});
    for (int a = 0; a < 2; ++a) {
      EXPECT_NEAR(sm[size_t(a)], ms(a, 0), 1e-11) << "smoothed mean t=" << t;
      EXPECT_NEAR(fm[size_t(a)], mf(a, 0), 1e-11) << "filtered mean t=" << t;
      for (int b = 0; b < 2; ++b) {
        EXPECT_NEAR(sv[size_t(a * 2 + b)], vs(a, b), 1e-11) << "smoothed variance t=" << t;
        EXPECT_NEAR(fv[size_t(a * 2 + b)], vf(a, b), 1e-11) << "filtered variance t=" << t;
      }
    }
  }
}

TEST(StateSpace, ForecastsAreTheDenseConditionalsOfFutureObservations) {
  const int T = 8, h = 3;
  Model m = kalman(1, T, h);
  const Vec y = observations(m, T, kGaps, 5);
  const TensorMap out = m.run(inputs_of(y, T));
  const Joint g(m, T + h);  // the same model run on past the data
  const Seen all = seen(y, 2, T);
  for (int k = 0; k < h; ++k) {
    const auto [mx, vx] = dense_state(g, y, all, T + k);
    const Mat my = mul(g.H, mx);
    const Mat vy = add(mul(mul(g.H, vx), tr(g.H)), g.R);
    const Vec fm = select(select(out.at("forecast"), "series", 0), "horizon", k).to_vector({"obs"});
    const Vec fv = select(select(out.at("forecast_var"), "series", 0), "horizon", k).to_vector({"obs"});
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(fm[size_t(i)], my(i, 0), 1e-11) << "forecast mean h=" << k + 1;
      EXPECT_NEAR(fv[size_t(i)], vy(i, i), 1e-11) << "forecast variance h=" << k + 1;
    }
  }
}

// The smoother is differentiable: its gradient (here of the sum of the smoothed means) matches
// finite differences.
TEST(StateSpace, SmootherGradientMatchesFiniteDifferences) {
  const int T = 6;
  json doc = json::parse(std::ifstream(kModel));
  doc["axes"]["series"] = 1;
  doc["axes"]["time"] = T;
  doc["graph"].push_back({{"name", "smooth_total"}, {"op", "sum"}, {"inputs", {"smoothed"}}});
  doc["outputs"]["smooth_total"] = "smooth_total";
  Model m = load_model_json(doc, kModel.parent_path());
  const TensorMap in = inputs_of(observations(m, T, {3 * 2 + 1}, 6), T);
  expect_gradient_matches_differences(m, "smooth_total", in);
}

// examples/nile/model.json is this graph with every axis of size 1; the two must not drift apart.
TEST(StateSpace, TheNileModelRunsTheKalmanModelsGraph) {
  const json nile = json::parse(std::ifstream(kModel.parent_path().parent_path() / "nile" / "model.json"));
  const json kalman_doc = json::parse(std::ifstream(kModel));
  EXPECT_EQ(nile["graph"], kalman_doc["graph"]);
  EXPECT_EQ(nile["outputs"]["loglik"], "loglik_diffuse");
}

}  // namespace
