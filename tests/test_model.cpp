// JSON models: the shipped example models against hand-written references, gradients against
// finite differences, save/load round trips, output pruning; the op reference's generation.
// Bad input, class by class: test_model_files.cpp.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tenax/model/op_attrs.h"
#include "tenax/model/op_reference.h"
#include "tenax/tenax.h"

#include "expect_message.h"

namespace {

using namespace tenax;
using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kExamples = fs::path(TENAX_SOURCE_DIR) / "examples";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// ---- a plain float64 Kalman filter (covariance form, explicit inverse of the 2x2 innovation) ----
using Mat = std::vector<double>;  // row-major n x n

struct SSM {
  int n = 2, p = 2;
  Mat F, Q, H, R, m0, P0;  // H: p x n
};

Mat mul(const Mat& a, const Mat& b, int r, int k, int c) {
  Mat o(size_t(r * c), 0.0);
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < c; ++j)
      for (int q = 0; q < k; ++q) o[size_t(i * c + j)] += a[size_t(i * k + q)] * b[size_t(q * c + j)];
  return o;
}
Mat tr(const Mat& a, int r, int c) {
  Mat o(a.size());
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < c; ++j) o[size_t(j * r + i)] = a[size_t(i * c + j)];
  return o;
}

// y: T x p row-major. Returns the log-likelihood.
double reference_loglik(const SSM& s, const std::vector<double>& y, int T) {
  const int n = s.n, p = s.p;
  Mat m = s.m0, P = s.P0;
  double ll = 0.0;
  for (int t = 0; t < T; ++t) {
    Mat mp = mul(s.F, m, n, n, 1);
    Mat Pp = mul(mul(s.F, P, n, n, n), tr(s.F, n, n), n, n, n);
    for (size_t k = 0; k < Pp.size(); ++k) Pp[k] += s.Q[k];
    Mat Hm = mul(s.H, mp, p, n, 1);
    Mat v(static_cast<size_t>(p), 0.0);
    for (int i = 0; i < p; ++i) v[size_t(i)] = y[size_t(t * p + i)] - Hm[size_t(i)];
    Mat S = mul(mul(s.H, Pp, p, n, n), tr(s.H, p, n), p, n, p);
    for (size_t k = 0; k < S.size(); ++k) S[k] += s.R[k];
    // 2x2 inverse and determinant
    const double det = S[0] * S[3] - S[1] * S[2];
    Mat Si = {S[3] / det, -S[1] / det, -S[2] / det, S[0] / det};
    Mat Siv = mul(Si, v, p, p, 1);
    ll -= 0.5 * (std::log(det) + p * std::log(2 * M_PI) + v[0] * Siv[0] + v[1] * Siv[1]);
    Mat K = mul(mul(Pp, tr(s.H, p, n), n, n, p), Si, n, p, p);
    Mat Kv = mul(K, v, n, p, 1);
    for (int i = 0; i < n; ++i) m[size_t(i)] = mp[size_t(i)] + Kv[size_t(i)];
    Mat KH = mul(K, s.H, n, p, n);
    Mat IKH(size_t(n * n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) IKH[size_t(i * n + j)] = (i == j) - KH[size_t(i * n + j)];
    P = mul(IKH, Pp, n, n, n);
  }
  return ll;
}

std::vector<double> simulate(const SSM& s, int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  std::vector<double> x = {0.0, 0.0}, y;
  // Cholesky factors of the 2x2 Q and R for the noise.
  auto chol = [](const Mat& a) {
    const double l00 = std::sqrt(a[0]), l10 = a[2] / l00;
    return Mat{l00, 0.0, l10, std::sqrt(a[3] - l10 * l10)};
  };
  const Mat lq = chol(s.Q), lr = chol(s.R);
  for (int t = 0; t < T; ++t) {
    Mat e = mul(lq, {z(rng), z(rng)}, 2, 2, 1);
    Mat fx = mul(s.F, x, 2, 2, 1);
    x = {fx[0] + e[0], fx[1] + e[1]};
    Mat hx = mul(s.H, x, 2, 2, 1), ev = mul(lr, {z(rng), z(rng)}, 2, 2, 1);
    y.push_back(hx[0] + ev[0]);
    y.push_back(hx[1] + ev[1]);
  }
  return y;
}

SSM from_model(const Model& m) {
  SSM s;
  s.F = m.parameter("F").to_vector({"state", "state2"});
  s.Q = m.parameter("Q").to_vector({"state", "state2"});
  s.H = m.parameter("H").to_vector({"obs", "state"});
  const std::vector<double> r = m.parameter("r").to_vector();
  s.R = {r[0], 0.0, 0.0, r[1]};
  s.m0 = m.parameter("m0").to_vector();
  s.P0 = m.parameter("P0").to_vector({"state", "state2"});
  return s;
}

Model kalman(int series, int T) {
  json doc = read_json(kExamples / "kalman" / "model.json");
  doc["axes"]["series"] = series;
  doc["axes"]["time"] = T;
  return load_model_json(doc, kExamples / "kalman");
}

TEST(Model, KalmanLoglikMatchesReferenceFilter) {
  const int T = 300;
  Model m = kalman(1, T);
  const SSM s = from_model(m);
  const std::vector<double> y = simulate(s, T, 7);
  const Tensor yt = tensor(y, Axes{{"series", 1}, {"time", T}, {"obs", 2}});
  const double got = m.run("loglik", {{"y", yt}}).item();
  const double want = reference_loglik(s, y, T);
  EXPECT_NEAR(got, want, 1e-10 * std::abs(want));
  // The filtered means come out stacked along time for every series.
  EXPECT_EQ(m.run({{"y", yt}}).at("filtered").axes().same_set(Axes{{"series", 1}, {"time", T}, {"state", 2}}), true);
}

TEST(Model, KalmanGradientMatchesFiniteDifferences) {
  const int T = 60;
  Model m = kalman(1, T);
  const std::vector<double> y = simulate(from_model(m), T, 3);
  const TensorMap in = {{"y", tensor(y, Axes{{"series", 1}, {"time", T}, {"obs", 2}})}};
  const ModelGradient g = m.value_and_grad("loglik", in);
  const std::vector<double> grad = Model::flatten(g.grads);
  const std::vector<double> u = m.unconstrained_vector();
  ASSERT_EQ(grad.size(), u.size());
  ASSERT_EQ(u.size(), 4u + 4u + 2u);  // F, Q (its full unconstrained square), r
  for (size_t k = 0; k < u.size(); ++k) {
    const double h = 1e-5;
    std::vector<double> up = u, dn = u;
    up[k] += h;
    dn[k] -= h;
    m.set_unconstrained_vector(up);
    const double fp = m.run("loglik", in).item();
    m.set_unconstrained_vector(dn);
    const double fm = m.run("loglik", in).item();
    m.set_unconstrained_vector(u);
    const double fd = (fp - fm) / (2 * h);
    EXPECT_NEAR(grad[k], fd, 1e-6 * (1.0 + std::abs(fd))) << "unconstrained coordinate " << k;
  }
}

TEST(Model, KalmanSeriesByNmapEqualPerSeriesRuns) {
  const int T = 40, S = 20;  // 20 series: the batched products take the wide-axis loops
  Model batched = kalman(S, T);
  Model single = kalman(1, T);
  const SSM s = from_model(batched);
  std::vector<double> all;
  std::vector<double> lls;
  for (int k = 0; k < S; ++k) {
    const std::vector<double> y = simulate(s, T, 100 + uint64_t(k));
    all.insert(all.end(), y.begin(), y.end());
    lls.push_back(single.run("loglik", {{"y", tensor(y, Axes{{"series", 1}, {"time", T}, {"obs", 2}})}}).item());
  }
  const TensorMap in = {{"y", tensor(all, Axes{{"series", S}, {"time", T}, {"obs", 2}})}};
  const std::vector<double> per = batched.run("loglik_series", in).to_vector();
  for (int k = 0; k < S; ++k) EXPECT_NEAR(per[size_t(k)], lls[size_t(k)], 1e-12 * std::abs(lls[size_t(k)]));
  // The batched gradient is the sum of the per-series gradients.
  std::vector<double> sum_g(single.unconstrained_vector().size(), 0.0);
  for (int k = 0; k < S; ++k) {
    std::vector<double> y(all.begin() + k * T * 2, all.begin() + (k + 1) * T * 2);
    const auto g = Model::flatten(
        single.value_and_grad("loglik", {{"y", tensor(y, Axes{{"series", 1}, {"time", T}, {"obs", 2}})}}).grads);
    for (size_t q = 0; q < g.size(); ++q) sum_g[q] += g[q];
  }
  const auto gb = Model::flatten(batched.value_and_grad("loglik", in).grads);
  for (size_t q = 0; q < gb.size(); ++q) EXPECT_NEAR(gb[q], sum_g[q], 1e-9 * (1 + std::abs(sum_g[q])));
}

TEST(Model, RepeatedEvaluationsEqualAFreshModels) {
  // A model keeps each scan's compiled step from one evaluation to the next (a fit evaluates it
  // many times): with new parameters, new data and forward-only runs in between, every value and
  // gradient must be what a freshly loaded copy (which compiles anew) gives.
  const int T = 30, S = 3;
  Model m = kalman(S, T);
  const std::vector<double> u0 = m.unconstrained_vector();
  for (int call = 0; call < 4; ++call) {
    std::vector<double> u = u0;
    for (size_t k = 0; k < u.size(); ++k) u[k] += 0.02 * double((k + 1) * (call + 1) % 5);
    m.set_unconstrained_vector(u);
    const TensorMap in = {
        {"y", randn(Axes{{"series", S}, {"time", T}, {"obs", 2}}, 40 + uint64_t(call % 2))}};
    const Model fresh = m;  // copies re-parse: nothing compiled
    if (call == 2) {        // a forward-only run in between
      const double want_run = fresh.run("loglik", in).item();
      EXPECT_NEAR(m.run("loglik", in).item(), want_run, 1e-12 * std::abs(want_run));
    }
    // (fresh's forward-only run above compiled untracked parameters: its gradient compiles anew)
    const ModelGradient got = m.value_and_grad("loglik", in), want = fresh.value_and_grad("loglik", in);
    EXPECT_NEAR(got.value.item(), want.value.item(), 1e-12 * std::abs(want.value.item())) << "call " << call;
    const std::vector<double> g = Model::flatten(got.grads), w = Model::flatten(want.grads);
    ASSERT_EQ(g.size(), w.size());
    for (size_t q = 0; q < g.size(); ++q)
      EXPECT_NEAR(g[q], w[q], 1e-10 * (1 + std::abs(w[q]))) << "call " << call << ", coordinate " << q;
  }
}

TEST(Model, SavedModelReloadsBitForBit) {
  const int T = 50;
  Model m = kalman(2, T);
  std::vector<double> u = m.unconstrained_vector();
  for (size_t k = 0; k < u.size(); ++k) u[k] += 0.01 * double(k + 1) / 3.0;  // not round numbers
  m.set_unconstrained_vector(u);
  const TensorMap in = {{"y", randn(Axes{{"series", 2}, {"time", T}, {"obs", 2}}, 5)}};
  const fs::path dir = fs::temp_directory_path() / "tenax_test_model_save";
  fs::create_directories(dir);
  m.save(dir / "fitted.json");
  Model again = load_model(dir / "fitted.json");
  EXPECT_EQ(again.unconstrained_vector(), u);
  const double a = m.run("loglik", in).item(), b = again.run("loglik", in).item();
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << a << " vs " << b;
  EXPECT_EQ(m.parameter("Q").to_vector(), again.parameter("Q").to_vector());
  fs::remove_all(dir);
}

TEST(Model, ParametersReadAndWriteThroughConstraints) {
  Model m = kalman(1, 10);
  const Tensor q = tensor(std::vector<double>{0.5, 0.2, 0.2, 0.4}, Axes{{"state", 2}, {"state2", 2}});
  m.set_parameter("Q", q);
  const std::vector<double> back = m.parameter("Q").to_vector({"state", "state2"});
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(back[k], q.to_vector()[k], 1e-14);
  m.set_parameter("r", tensor({2.0, 1e-3}, "obs"));
  EXPECT_NEAR(m.parameter("r").to_vector()[1], 1e-3, 1e-17);
  EXPECT_MESSAGE(
      tenax::testing::error_message<ModelError>([&] {
        m.set_parameter("r", tensor({-1.0, 1.0}, "obs"));
      }),
      "/parameters/r: the value violates its constraint positive (softplus): it holds -1.000000, not > 0");
  EXPECT_MESSAGE(tenax::testing::error_message<ModelError>([&] {
                   m.set_parameter("Q", tensor(std::vector<double>{1.0, 2.0, 2.0, 1.0},
                                               Axes{{"state", 2}, {"state2", 2}}));
                 }),
                 "/parameters/Q: the value violates its constraint spd over (state, state2): it is not "
                 "positive definite");
  EXPECT_MESSAGE(tenax::testing::error_message<ModelError>([&] {
                   m.set_parameter("F", tensor({1.0, 2.0}, "obs"));
                 }),
                 "/parameters/F: parameter 'F' has axes (state=2, state2=2), got (obs=2)");
  EXPECT_MESSAGE(tenax::testing::error_message<ModelError>([&] { (void)m.parameter("nope"); }),
                 "/parameters: no parameter named 'nope' (parameters: A_diffuse, F, H, N_end, P0, Q, ahead, eye_obs, eye_state, m0, r, r_end)");
  EXPECT_EQ(m.trainable(), (std::vector<std::string>{"F", "Q", "r"}));
  // A coordinate whose softplus underflows to exactly 0 (u < about -745) is refused, and nothing
  // changes (the whole vector is checked first): an optimiser's trial point fails instead of
  // running the model with r = 0.
  const std::vector<double> before = m.unconstrained_vector();
  std::vector<double> far = before;
  far.back() = -800.0;
  EXPECT_MESSAGE(tenax::testing::error_message<NumericError>([&] { m.set_unconstrained_vector(far); }),
                 "/parameters/r: unconstrained coordinate 1 = -800 maps to 0 under the positive (softplus) constraint");
  EXPECT_EQ(m.unconstrained_vector(), before);
  EXPECT_THROW(m.set_unconstrained("r", tensor({-1.0, -746.0}, "obs")), NumericError);
  m.set_unconstrained("r", tensor({-1.0, -700.0}, "obs"));  // 1e-304: small, but representable
  EXPECT_GT(m.parameter("r").to_vector()[1], 0.0);
}

TEST(Model, RecurrenceModelMatchesLinearRecurrence) {
  Model m = load_model(kExamples / "recurrence" / "model.json");
  const TensorMap out = m.run();
  // The same two layers written with the library directly.
  const json doc = read_json(kExamples / "recurrence" / "model.json");
  const int64_t T = doc["axes"]["time"], F = doc["axes"]["feature"];
  Tensor u = m.run("inputs");
  Tensor h = u;
  for (const char* layer : {"1", "2"}) {
    const Tensor lam = m.parameter(std::string("decay") + layer);
    const Tensor w = m.parameter(std::string("mix") + layer);
    Tensor z = dot(w, rename(h, "feature", "feature2"), {"feature2"});
    h = tanh(linear_recurrence(lam, z, "time"));
  }
  const double want = mean(square(h)).item();
  EXPECT_NEAR(out.at("energy").item(), want, 1e-12 * std::abs(want));
  EXPECT_EQ(h.size("time"), T);
  EXPECT_EQ(h.size("feature"), F);
  // And its gradient against finite differences on one coordinate of each trainable parameter.
  const ModelGradient g = m.value_and_grad("energy");
  const std::vector<double> grad = Model::flatten(g.grads), u0 = m.unconstrained_vector();
  for (size_t k : {size_t(0), u0.size() / 2, u0.size() - 1}) {
    std::vector<double> p = u0, q = u0;
    p[k] += 1e-6;
    q[k] -= 1e-6;
    m.set_unconstrained_vector(p);
    const double fp = m.run("energy").item();
    m.set_unconstrained_vector(q);
    const double fm = m.run("energy").item();
    m.set_unconstrained_vector(u0);
    EXPECT_NEAR(grad[k], (fp - fm) / 2e-6, 1e-6 * (1 + std::abs(grad[k])));
  }
}

// examples/diffusion: backward-Euler diffusion in flux form, one tridiagonal solve per column and
// step. Checked against a plain Thomas loop written here, against conservation of each column's
// heat content (no-flux ends), and its misfit gradient against central differences.
TEST(Model, DiffusionModelMatchesAThomasLoopConservesHeatAndDifferentiates) {
  Model m = load_model(kExamples / "diffusion" / "model.json");
  const json doc = read_json(kExamples / "diffusion" / "model.json");
  const int64_t T = doc["axes"]["time"], C = doc["axes"]["column"], Z = doc["axes"]["depth"];
  std::vector<double> k(static_cast<size_t>(Z));
  for (int64_t z = 0; z < Z; ++z) k[size_t(z)] = 0.2 + 1.5 * std::exp(-std::pow((double(z) - 8.0) / 5.0, 2));
  m.set_parameter("kappa", tensor(k, Axes{{"depth", Z}}));
  k[size_t(Z - 1)] = 0.0;  // the bottom face is closed
  const Tensor obs0 = zeros(Axes{{"time", T}, {"column", C}, {"depth", Z}});
  const std::vector<double> got = m.run("profiles", {{"obs", obs0}}).to_vector({"time", "column", "depth"});
  const std::vector<double> u0 = m.run("initial", {{"obs", obs0}}).to_vector({"column", "depth"});
  // Reference: (1 + k_{z-1} + k_z) u'_z - k_{z-1} u'_{z-1} - k_z u'_{z+1} = u_z, k_{-1} = 0.
  for (int64_t c = 0; c < C; ++c) {
    std::vector<double> u(u0.begin() + c * Z, u0.begin() + (c + 1) * Z);
    std::vector<double> cp(static_cast<size_t>(Z)), dp(static_cast<size_t>(Z));
    double heat0 = 0;
    for (double v : u) heat0 += v;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t z = 0; z < Z; ++z) {
        const double km = z > 0 ? k[size_t(z - 1)] : 0.0, kz = k[size_t(z)];
        const double lo = -km, di = 1 + km + kz, up = -kz;
        const double den = di - (z > 0 ? lo * cp[size_t(z - 1)] : 0.0);
        cp[size_t(z)] = up / den;
        dp[size_t(z)] = (u[size_t(z)] - (z > 0 ? lo * dp[size_t(z - 1)] : 0.0)) / den;
      }
      u[size_t(Z - 1)] = dp[size_t(Z - 1)];
      for (int64_t z = Z - 2; z >= 0; --z) u[size_t(z)] = dp[size_t(z)] - cp[size_t(z)] * u[size_t(z + 1)];
      double heat = 0;
      for (int64_t z = 0; z < Z; ++z) {
        EXPECT_NEAR(got[size_t((t * C + c) * Z + z)], u[size_t(z)], 1e-13)
            << "t " << t << " column " << c << " z " << z;
        heat += got[size_t((t * C + c) * Z + z)];
      }
      EXPECT_NEAR(heat, heat0, 1e-11) << "heat content of column " << c << " at step " << t;
    }
  }
  // Observations from these diffusivities: the misfit is zero there; from a flat start, its
  // gradient matches central differences in the unconstrained coordinates.
  const Tensor obs = m.run("profiles", {{"obs", obs0}});
  EXPECT_NEAR(m.run("misfit", {{"obs", obs}}).item(), 0.0, 1e-24);
  m.set_parameter("kappa", full(Axes{{"depth", Z}}, 0.5));
  const ModelGradient g = m.value_and_grad("misfit", {{"obs", obs}});
  const std::vector<double> grad = g.grads[0].to_vector(), x0 = m.unconstrained_vector();
  ASSERT_EQ(grad.size(), size_t(Z));
  EXPECT_EQ(grad[size_t(Z - 1)], 0.0);  // the closed bottom face does not enter the model
  for (size_t j = 0; j < x0.size(); j += 4) {
    std::vector<double> p = x0, q = x0;
    p[j] += 1e-6;
    q[j] -= 1e-6;
    m.set_unconstrained_vector(p);
    const double fp = m.run("misfit", {{"obs", obs}}).item();
    m.set_unconstrained_vector(q);
    const double fm = m.run("misfit", {{"obs", obs}}).item();
    EXPECT_NEAR(grad[j], (fp - fm) / 2e-6, 1e-6 * (1 + std::abs(grad[j]))) << "kappa coordinate " << j;
  }
}

TEST(Model, MapNodeEqualsNmapNodeAndInitRulesAreSeeded) {
  const char* text = R"({
    "format": 1,
    "axes": {"batch": 10, "feat": 3},
    "parameters": {
      "w": {"axes": ["feat"], "init": {"rule": "normal", "seed": 4, "scale": 0.5}},
      "s": {"axes": [], "value": 0.3, "constraint": {"type": "interval", "lower": 0, "upper": 1}},
      "k": {"axes": [], "value": 2.0, "constraint": {"type": "positive", "transform": "exp"}}
    },
    "inputs": {"x": {"axes": ["batch", "feat"], "value": 0.25}},
    "graph": [
      {"op": "map", "over": "batch", "batch_size": 3, "inputs": ["x"], "outputs": ["a"],
       "body": {"args": ["xi"], "graph": [{"name": "d", "op": "dot", "inputs": ["xi", "w"], "attrs": {"over": ["feat"]}},
                                          {"name": "e", "op": "mul", "inputs": ["d", "s"]}], "results": ["e"]}},
      {"op": "nmap", "over": ["batch"], "inputs": ["x"], "outputs": ["b"],
       "body": {"args": ["xi"], "graph": [{"name": "d", "op": "dot", "inputs": ["xi", "w"], "attrs": {"over": ["feat"]}},
                                          {"name": "e", "op": "mul", "inputs": ["d", "s"]}], "results": ["e"]}},
      {"name": "la", "op": "sum", "inputs": ["a"]},
      {"name": "lb", "op": "sum", "inputs": ["b"]},
      {"name": "total", "op": "mul", "inputs": ["la", "k"]}
    ],
    "outputs": {"a": "a", "b": "b", "total": "total"}
  })";
  Model m1 = load_model_string(text), m2 = load_model_string(text);
  EXPECT_EQ(m1.parameter("w").to_vector(), m2.parameter("w").to_vector());
  const TensorMap out = m1.run();
  EXPECT_EQ(out.at("a").to_vector(), out.at("b").to_vector());
  const std::vector<double> w = m1.parameter("w").to_vector();
  EXPECT_NEAR(out.at("a").to_vector()[0], 0.25 * (w[0] + w[1] + w[2]) * 0.3, 1e-15);
  EXPECT_NEAR(m1.parameter("k").item(), 2.0, 1e-15);
  // Parameters come in name order (k, s, w). d total / d u_k = total (exp constraint);
  // d total / d u_s = total / s * s (1 - s); d total / d w_j = k s 0.25 * 10 rows, through the
  // map node only (total = la * k): w reaches the recomputed chunks as a captured argument.
  EXPECT_EQ(m1.trainable(), (std::vector<std::string>{"k", "s", "w"}));
  const ModelGradient g = m1.value_and_grad("total");
  const double total = g.value.item();
  EXPECT_NEAR(g.grads[0].item(), total, 1e-12);
  EXPECT_NEAR(g.grads[1].item(), total * (1 - 0.3), 1e-12);
  for (double gw : g.grads[2].to_vector()) EXPECT_NEAR(gw, 2.0 * 0.3 * 0.25 * 10, 1e-12);
}

// ---- every registered op is reachable by name ----
TEST(Model, EveryRegisteredOpHasItsAttributesSpelled) {
  for (const OpDef* op : registered_ops()) {
    if (op->attr_free) continue;
    const auto sample_rng = std::make_unique<SampleRng>(1);
    const OpSample s = op->sample(*sample_rng, DType::f64);
    const bool reads_attrs = s.attrs.axes.size() > 0 || s.attrs.axes2.size() > 0 || s.attrs.shape.rank() > 0 ||
                             s.attrs.i[0] != 0 || s.attrs.i[1] != 0 || s.attrs.i[2] != 0;
    if (reads_attrs) {
      EXPECT_FALSE(op->attrs.empty()) << op->name << " reads attributes";
    }
  }
}

TEST(Model, ScanResidualBudgetIsReadAndKeepsTheGradient) {
  // "residual_budget": 0 makes the scan recompute each step in its reverse pass instead of reading
  // the kept intermediates (the default): the same gradient to the bit, and less memory kept.
  const int T = 50;
  json doc = read_json(kExamples / "kalman" / "model.json");
  doc["axes"]["series"] = 2;
  doc["axes"]["time"] = T;
  // The filter: the first scan inside the nmap.
  auto first = [](json& graph, const char* op) -> size_t {
    for (size_t k = 0; k < graph.size(); ++k)
      if (graph[k].value("op", "") == op) return k;
    return graph.size();
  };
  const size_t nmap_at = first(doc["graph"], "nmap");
  ASSERT_LT(nmap_at, doc["graph"].size());
  json& body = doc["graph"][nmap_at]["body"]["graph"];
  const size_t scan_at = first(body, "scan");
  ASSERT_LT(scan_at, body.size());
  json& scan_node = body[scan_at];
  Model kept = load_model_json(doc, kExamples / "kalman");
  scan_node["residual_budget"] = 0;
  Model recomputed = load_model_json(doc, kExamples / "kalman");
  const std::vector<double> y = simulate(from_model(kept), 2 * T, 5);
  const TensorMap in = {{"y", tensor(y, Axes{{"series", 2}, {"time", T}, {"obs", 2}})}};
  const ModelGradient a = kept.value_and_grad("loglik", in), b = recomputed.value_and_grad("loglik", in);
  EXPECT_EQ(a.value.item(), b.value.item());
  EXPECT_EQ(Model::flatten(a.grads), Model::flatten(b.grads));
  scan_node["residual_budget"] = -1;
  EXPECT_MESSAGE(tenax::testing::error_message<ModelError>([&] { (void)load_model_json(doc, kExamples / "kalman"); }),
                 "/graph/" + std::to_string(nmap_at) + "/body/graph/" + std::to_string(scan_at) +
                     "/residual_budget: expected an integer >= 0");
}

// Found by the fuzzer: one number for a huge array was expanded into a host vector first, past
// the memory budget (seconds of page faults) or past what a vector can hold (std::length_error).
TEST(Model, AnOutputRunsOnlyWhatItNeeds) {
  const json d = json::parse(R"({
    "format": 1,
    "axes": {"t": 3, "i": 2, "j": 2},
    "parameters": {"a": {"axes": [], "value": 0.5},
                   "bad": {"axes": ["i", "j"], "value": [[1, 2], [2, 1]], "trainable": false}},
    "inputs": {"x": {"axes": ["t"], "value": [1, 2, 3]}},
    "graph": [
      {"op": "scan", "over": "t", "init": ["bad", "a"], "xs": ["x"], "outputs": ["k_last", "c_last", "l_t"],
       "body": {"carry": ["k", "c"], "x": ["x_t"], "graph": [
         {"name": "cx", "op": "mul", "inputs": ["c", "x_t"]},
         {"name": "c_new", "op": "add", "inputs": ["cx", "a"]},
         {"name": "k_new", "op": "cholesky", "inputs": ["k"], "attrs": {"row": "i", "col": "j"}},
         {"name": "m", "op": "mul", "inputs": ["bad", "c"]},
         {"name": "l", "op": "cholesky", "inputs": ["m"], "attrs": {"row": "i", "col": "j"}}],
        "carry_out": ["k_new", "c_new"], "ys": ["l"]}},
      {"name": "l_out", "op": "cholesky", "inputs": ["bad"], "attrs": {"row": "i", "col": "j"}},
      {"name": "loss", "op": "square", "inputs": ["c_last"]}
    ],
    "outputs": {"loss": "loss", "l_t": "l_t", "l_out": "l_out", "k_last": "k_last"}
  })");
  // The file loads: the check run meets the failure as a numeric one, which does not invalidate it.
  Model m = load_model_json(d);
  // c = 0.5 -> 0.5*1+0.5 = 1 -> 1*2+0.5 = 2.5 -> 2.5*3+0.5 = 8; loss = 64; dloss/da by hand.
  EXPECT_DOUBLE_EQ(m.run("loss").item(), 64.0);
  const ModelGradient g = m.value_and_grad("loss");
  // c1 = a + a, c2 = 2 c1 + a, c3 = 3 c2 + a: dc3/da = 3 (2 * 2 + 1) + 1 = 16; dloss = 2 * 8 * 16.
  EXPECT_DOUBLE_EQ(g.grads[0].item(), 256.0);
  EXPECT_THROW((void)m.run("l_t"), NumericError);
  EXPECT_THROW((void)m.run("l_out"), NumericError);
  EXPECT_THROW((void)m.run("k_last"), NumericError);
  EXPECT_THROW((void)m.run(), NumericError);
}

}  // namespace

// ---- the op reference and the schema's op nodes come from the op definitions ----
// docs/ops.md and model/ops.schema.json must equal what the registry generates;
// with TENAX_REGENERATE_REFERENCE=1 this test rewrites them instead (then review the diff).
TEST(OpReference, DocsAndSchemaAreGeneratedFromTheOpDefinitions) {
  const fs::path root = TENAX_SOURCE_DIR;
  const std::string markdown = model_detail::op_reference_markdown();
  const json generated = model_detail::registered_op_schema();
  const bool regenerate = std::getenv("TENAX_REGENERATE_REFERENCE") != nullptr;
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  if (regenerate) {
    std::ofstream(root / "docs/ops.md") << markdown;
    std::ofstream(root / "model/ops.schema.json") << generated.dump(1) << "\n";
  }
  const std::string how = "; regenerate with TENAX_REGENERATE_REFERENCE=1 and the same test filter";
  EXPECT_EQ(read(root / "docs/ops.md"), markdown) << "docs/ops.md is stale" << how;
  EXPECT_EQ(json::parse(read(root / "model/ops.schema.json")), generated) << "model/ops.schema.json is stale" << how;
  // Every op and every attribute is documented.
  for (const OpDef* op : registered_ops()) {
    EXPECT_GT(std::strlen(op->doc), 10u) << op->name;
    for (const AttrSpec& a : op->attrs) EXPECT_GT(std::strlen(a.doc), 5u) << op->name << "/" << a.key;
  }
}

// The reference's attribute table and the loader agree: each documented attribute is accepted
// under its key, and an undocumented one is refused naming the documented ones.
TEST(OpReference, TheLoaderAcceptsExactlyTheDocumentedAttributes) {
  ModelAxes declared;
  declared.add("i", 2);
  for (const OpDef* op : registered_ops()) {
    json attrs = json::object();
    attrs["no_such_attribute"] = 1;
    std::string want = "unknown attribute 'no_such_attribute' of op '" + std::string(op->name) + "' (expected: ";
    std::string keys;
    for (const AttrSpec& a : op->attrs) keys += (keys.empty() ? "" : ", ") + std::string(a.key);
    want += (keys.empty() ? "none" : keys) + ")";
    try {
      (void)model_detail::parse_attrs(*op, &attrs, "/graph/0/attrs", declared);
      ADD_FAILURE() << op->name << " accepted an unknown attribute";
    } catch (const ModelError& e) {
      EXPECT_MESSAGE(e.what(), want);
    }
  }
}
