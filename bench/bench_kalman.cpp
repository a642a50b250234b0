// The Kalman flagship (issue 7): log-likelihood + gradient through the JSON model (scan over time,
// nmap over series) against a hand-written C++ forward-only filter of the same math in the same
// run. State dimensions 2, 4, 8, 16; 2 observations; 1 or 256 series; T = 1000 (and T = 250 / 4000
// at state 4 for linearity). Counter ns_per_series_step = time / (series x T).
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include <tenax/tenax.h>

#include "kalman.h"

namespace {

using namespace tenax;
using nlohmann::json;

constexpr int64_t kObs = 2;

json matrix(int64_t rows, int64_t cols, const std::function<double(int64_t, int64_t)>& f) {
  json m = json::array();
  for (int64_t r = 0; r < rows; ++r) {
    json row = json::array();
    for (int64_t c = 0; c < cols; ++c) row.push_back(f(r, c));
    m.push_back(row);
  }
  return m;
}

// The shipped model with state dimension n: F = 0.9 I + 0.05 on the superdiagonal, Q = 0.1 I +
// 0.02 off-diagonal neighbours, H picks state 0 and 0.5 state 0 + state 1 (state 1 when n > 1).
Model model(int64_t n, int64_t series, int64_t steps) {
  json doc = kalman::default_model();
  for (const char* a : {"state", "state2", "state3"}) doc["axes"][a] = n;
  doc["axes"]["series"] = series;
  doc["axes"]["time"] = steps;
  auto& p = doc["parameters"];
  p["F"]["value"] = matrix(n, n, [](int64_t r, int64_t c) { return r == c ? 0.9 : c == r + 1 ? 0.05 : 0.0; });
  p["Q"]["value"] = matrix(n, n, [](int64_t r, int64_t c) { return r == c ? 0.1 : std::abs(r - c) == 1 ? 0.02 : 0.0; });
  p["H"]["value"] = matrix(kObs, n, [n](int64_t r, int64_t c) {
    if (r == 0) return c == 0 ? 1.0 : 0.0;
    return c == 0 ? 0.5 : (c == 1 && n > 1) ? 1.0 : 0.0;
  });
  return load_model_json(doc);
}

// Forward-only filter on raw arrays, the same math as the model: Cholesky of S, triangular solves
// for w = L⁻¹ v and B = L⁻¹ H P, m += Bᵀ w, P -= Bᵀ B, symmetrised.
struct HandFilter {
  int64_t n, p;
  std::vector<double> F, Q, H, r;
  std::vector<double> m, P, mp, Pp, FP, HP, S, L, v, w, B;

  HandFilter(const Model& mod, int64_t n_, int64_t p_) : n(n_), p(p_) {
    F = mod.parameter("F").to_vector({"state", "state2"});
    Q = mod.parameter("Q").to_vector({"state", "state2"});
    H = mod.parameter("H").to_vector({"obs", "state"});
    r = mod.parameter("r").to_vector();
    const auto N = size_t(n), M = size_t(p);
    m.resize(N);
    P.resize(N * N);
    mp.resize(N);
    Pp.resize(N * N);
    FP.resize(N * N);
    HP.resize(M * N);
    S.resize(M * M);
    L.resize(M * M);
    v.resize(M);
    w.resize(M);
    B.resize(M * N);
  }

  double loglik(const double* y, int64_t steps) {
    const auto N = size_t(n), M = size_t(p);
    std::fill(m.begin(), m.end(), 0.0);
    std::fill(P.begin(), P.end(), 0.0);
    for (size_t i = 0; i < N; ++i) P[i * N + i] = 1.0;
    double ll = 0.0;
    for (int64_t t = 0; t < steps; ++t) {
      for (size_t i = 0; i < N; ++i) {
        double s = 0;
        for (size_t k = 0; k < N; ++k) s += F[i * N + k] * m[k];
        mp[i] = s;
      }
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j < N; ++j) {
          double s = 0;
          for (size_t k = 0; k < N; ++k) s += F[i * N + k] * P[k * N + j];
          FP[i * N + j] = s;
        }
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j < N; ++j) {
          double s = Q[i * N + j];
          for (size_t k = 0; k < N; ++k) s += FP[i * N + k] * F[j * N + k];
          Pp[i * N + j] = s;
        }
      for (size_t o = 0; o < M; ++o) {
        double s = 0;
        for (size_t k = 0; k < N; ++k) s += H[o * N + k] * mp[k];
        v[o] = y[size_t(t) * M + o] - s;
        for (size_t j = 0; j < N; ++j) {
          double h = 0;
          for (size_t k = 0; k < N; ++k) h += H[o * N + k] * Pp[k * N + j];
          HP[o * N + j] = h;
        }
      }
      for (size_t a = 0; a < M; ++a)
        for (size_t b = 0; b < M; ++b) {
          double s = a == b ? r[a] : 0.0;
          for (size_t k = 0; k < N; ++k) s += HP[a * N + k] * H[b * N + k];
          S[a * M + b] = s;
        }
      double logdiag = 0;
      for (size_t j = 0; j < M; ++j) {
        double d = S[j * M + j];
        for (size_t k = 0; k < j; ++k) d -= L[j * M + k] * L[j * M + k];
        const double ljj = std::sqrt(d);
        L[j * M + j] = ljj;
        logdiag += std::log(ljj);
        for (size_t i = j + 1; i < M; ++i) {
          double s = S[i * M + j];
          for (size_t k = 0; k < j; ++k) s -= L[i * M + k] * L[j * M + k];
          L[i * M + j] = s / ljj;
        }
      }
      double maha = 0;
      for (size_t i = 0; i < M; ++i) {
        double s = v[i];
        for (size_t k = 0; k < i; ++k) s -= L[i * M + k] * w[k];
        w[i] = s / L[i * M + i];
        maha += w[i] * w[i];
        for (size_t j = 0; j < N; ++j) {
          double b = HP[i * N + j];
          for (size_t k = 0; k < i; ++k) b -= L[i * M + k] * B[k * N + j];
          B[i * N + j] = b / L[i * M + i];
        }
      }
      for (size_t j = 0; j < N; ++j) {
        double s = mp[j];
        for (size_t k = 0; k < M; ++k) s += B[k * N + j] * w[k];
        m[j] = s;
      }
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j <= i; ++j) {
          double s = 0;
          for (size_t k = 0; k < M; ++k) s += B[k * N + i] * B[k * N + j];
          const double pij = 0.5 * (Pp[i * N + j] + Pp[j * N + i]) - s;
          P[i * N + j] = pij;
          P[j * N + i] = pij;
        }
      ll -= 0.5 * maha + logdiag + 0.91893853320467274178 * double(M);
    }
    return ll;
  }
};

void per_series_step(benchmark::State& state, int64_t series, int64_t steps) {
  state.counters["ns_per_series_step"] = benchmark::Counter(
      double(series * steps), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// args: state dimension, series, T
void BM_Kalman_HandWrittenForward(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = model(n, 1, 8);
  HandFilter f(mod, n, kObs);
  const std::vector<double> y = randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3).to_vector();
  for (auto _ : state) {
    double total = 0;
    for (int64_t s = 0; s < series; ++s) total += f.loglik(y.data() + s * steps * kObs, steps);
    benchmark::DoNotOptimize(total);
  }
  per_series_step(state, series, steps);
}

void BM_Kalman_TenaxValueAndGrad(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = model(n, series, steps);
  const TensorMap in = {{"y", randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3)}};
  // Same log-likelihood as the hand-written filter (checked once, outside the timing).
  {
    HandFilter f(mod, n, kObs);
    const std::vector<double> y = in.at("y").to_vector();
    double want = 0;
    for (int64_t s = 0; s < series; ++s) want += f.loglik(y.data() + s * steps * kObs, steps);
    const double got = mod.run("loglik", in).item();
    if (std::abs(got - want) > 1e-8 * std::abs(want)) state.SkipWithError("the model and the hand-written filter disagree");
  }
  for (auto _ : state) {
    ModelGradient g = mod.value_and_grad("loglik", in);
    benchmark::DoNotOptimize(g.grads[0].data_ptr());
  }
  per_series_step(state, series, steps);
}

void BM_Kalman_TenaxForward(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = model(n, series, steps);
  const TensorMap in = {{"y", randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3)}};
  for (auto _ : state) {
    Tensor v = mod.run("loglik", in);
    benchmark::DoNotOptimize(v.data_ptr());
  }
  per_series_step(state, series, steps);
}

void configs(benchmark::internal::Benchmark* b) {
  for (int64_t n : {2, 4, 8, 16})
    for (int64_t series : {1, 256}) b->Args({n, series, series == 1 ? 1000 : 200});
  b->Args({4, 1, 250});
  b->Args({4, 1, 4000});
  b->ArgNames({"state", "series", "T"});
}

BENCHMARK(BM_Kalman_HandWrittenForward)->Apply(configs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Kalman_TenaxValueAndGrad)->Apply(configs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Kalman_TenaxForward)->Apply(configs)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
