// The Kalman flagship (issue 7): log-likelihood + gradient through the JSON model (scan over time,
// nmap over series) against a hand-written C++ forward-only filter of the same math in the same
// run, and against the same filter with a hand-written reverse pass (checked against finite
// differences before timing). State dimensions 2, 4, 8, 16; 2 observations; 1 or 256 series;
// T = 1000 (and T = 250 / 4000 at state 4 for linearity). Counter ns_per_series_step = time /
// (series x T).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <tenax/tenax.h>

#include "kalman.h"
#include "kalman_bench_model.h"

namespace {

using namespace tenax;
using bench::kObs;

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

// The same filter with a hand-written reverse pass: what a perfect step compiler could reach.
// The forward keeps each step's carries and intermediates (m, P, m_pred, F P, P_pred, H P_pred, L,
// w, B: 624 bytes per step at state 4); the reverse walks them back and accumulates the raw
// gradients of F, Q, H and r (the model's constraints are outside the loop and not counted).
// Its forward repeats HandFilter::loglik's loops on purpose: HandFilter stays the exact code every
// earlier figure was measured with (a step shared by both, through pointers, measured ~3% slower
// as the forward-only baseline, which would flatter Tenax's ratios).
struct HandAdjoint : HandFilter {
  std::vector<double> tape;  // per step: the kept arrays, in the order of `Kept`
  std::vector<double> gF, gQ, gH, gr;
  struct Kept {
    double *m, *P, *mp, *FP, *Pp, *HP, *L, *w, *B;
  };
  int64_t per_step() const { return n + n * n + n + n * n + n * n + p * n + p * p + p + p * n; }
  Kept kept(int64_t t) {
    double* q = tape.data() + t * per_step();
    Kept k{};
    for (auto [ptr, len] : {std::pair{&k.m, n},
                            {&k.P, n * n},
                            {&k.mp, n},
                            {&k.FP, n * n},
                            {&k.Pp, n * n},
                            {&k.HP, p * n},
                            {&k.L, p * p},
                            {&k.w, p},
                            {&k.B, p * n}}) {
      *ptr = q;
      q += len;
    }
    return k;
  }

  HandAdjoint(const Model& mod, int64_t n_, int64_t p_) : HandFilter(mod, n_, p_) {}

  double value_and_grad(const double* y, int64_t steps) {
    const auto N = size_t(n), M = size_t(p);
    tape.resize(size_t(steps * per_step()));
    gF.assign(N * N, 0.0);
    gQ.assign(N * N, 0.0);
    gH.assign(M * N, 0.0);
    gr.assign(M, 0.0);
    double ll = 0.0;
    // Forward: the loops of HandFilter::loglik, writing into the step's kept arrays.
    for (int64_t t = 0; t < steps; ++t) {
      const Kept k = kept(t);
      if (t == 0) {
        std::fill(k.m, k.m + N, 0.0);
        std::fill(k.P, k.P + N * N, 0.0);
        for (size_t i = 0; i < N; ++i) k.P[i * N + i] = 1.0;
      } else {
        std::copy(m.begin(), m.end(), k.m);
        std::copy(P.begin(), P.end(), k.P);
      }
      for (size_t i = 0; i < N; ++i) {
        double s = 0;
        for (size_t c = 0; c < N; ++c) s += F[i * N + c] * k.m[c];
        k.mp[i] = s;
      }
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j < N; ++j) {
          double s = 0;
          for (size_t c = 0; c < N; ++c) s += F[i * N + c] * k.P[c * N + j];
          k.FP[i * N + j] = s;
        }
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j < N; ++j) {
          double s = Q[i * N + j];
          for (size_t c = 0; c < N; ++c) s += k.FP[i * N + c] * F[j * N + c];
          k.Pp[i * N + j] = s;
        }
      for (size_t o = 0; o < M; ++o) {
        double s = 0;
        for (size_t c = 0; c < N; ++c) s += H[o * N + c] * k.mp[c];
        v[o] = y[size_t(t) * M + o] - s;
        for (size_t j = 0; j < N; ++j) {
          double h = 0;
          for (size_t c = 0; c < N; ++c) h += H[o * N + c] * k.Pp[c * N + j];
          k.HP[o * N + j] = h;
        }
      }
      for (size_t a = 0; a < M; ++a)
        for (size_t b = 0; b < M; ++b) {
          double s = a == b ? r[a] : 0.0;
          for (size_t c = 0; c < N; ++c) s += k.HP[a * N + c] * H[b * N + c];
          S[a * M + b] = s;
        }
      double logdiag = 0;
      for (size_t j = 0; j < M; ++j) {
        double d = S[j * M + j];
        for (size_t c = 0; c < j; ++c) d -= k.L[j * M + c] * k.L[j * M + c];
        const double ljj = std::sqrt(d);
        k.L[j * M + j] = ljj;
        logdiag += std::log(ljj);
        for (size_t i = j + 1; i < M; ++i) {
          double s = S[i * M + j];
          for (size_t c = 0; c < j; ++c) s -= k.L[i * M + c] * k.L[j * M + c];
          k.L[i * M + j] = s / ljj;
        }
        for (size_t i = 0; i < j; ++i) k.L[i * M + j] = 0.0;
      }
      double maha = 0;
      for (size_t i = 0; i < M; ++i) {
        double s = v[i];
        for (size_t c = 0; c < i; ++c) s -= k.L[i * M + c] * k.w[c];
        k.w[i] = s / k.L[i * M + i];
        maha += k.w[i] * k.w[i];
        for (size_t j = 0; j < N; ++j) {
          double b = k.HP[i * N + j];
          for (size_t c = 0; c < i; ++c) b -= k.L[i * M + c] * k.B[c * N + j];
          k.B[i * N + j] = b / k.L[i * M + i];
        }
      }
      for (size_t j = 0; j < N; ++j) {
        double s = k.mp[j];
        for (size_t c = 0; c < M; ++c) s += k.B[c * N + j] * k.w[c];
        m[j] = s;
      }
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j <= i; ++j) {
          double s = 0;
          for (size_t c = 0; c < M; ++c) s += k.B[c * N + i] * k.B[c * N + j];
          const double pij = 0.5 * (k.Pp[i * N + j] + k.Pp[j * N + i]) - s;
          P[i * N + j] = pij;
          P[j * N + i] = pij;
        }
      ll -= 0.5 * maha + logdiag + 0.91893853320467274178 * double(M);
    }
    // Reverse. gm, gP: cotangents of the carries m, P leaving the step (zero after the last).
    std::vector<double>& gm = mp;  // HandFilter's scratch, free now
    std::vector<double>& gP = Pp;
    std::fill(gm.begin(), gm.end(), 0.0);
    std::fill(gP.begin(), gP.end(), 0.0);
    thread_local std::vector<double> gB, gw, gv, gL, gS, gHP, gPp, gFP, gmp, sym;
    gB.resize(M * N), gw.resize(M), gv.resize(M), gL.resize(M * M), gS.resize(M * M);
    gHP.resize(M * N), gPp.resize(N * N), gFP.resize(N * N), gmp.resize(N), sym.resize(N * N);
    for (int64_t t = steps; t-- > 0;) {
      const Kept k = kept(t);
      // P' = (Pp + Ppᵀ)/2 - BᵀB;  m' = mp + Bᵀ w.
      for (size_t i = 0; i < N; ++i)
        for (size_t j = 0; j < N; ++j) sym[i * N + j] = gP[i * N + j] + gP[j * N + i];
      for (size_t i = 0; i < N * N; ++i) gPp[i] = 0.5 * sym[i];
      for (size_t c = 0; c < M; ++c) {
        double s = 0;
        for (size_t j = 0; j < N; ++j) {
          double b = k.w[c] * gm[j];
          for (size_t i = 0; i < N; ++i) b -= k.B[c * N + i] * sym[i * N + j];
          gB[c * N + j] = b;
          s += k.B[c * N + j] * gm[j];
        }
        gw[c] = s - k.w[c];  // loglik -= maha / 2: d/dw = -w
      }
      for (size_t i = 0; i < N; ++i) gmp[i] = gm[i];
      // L̄ from log L_jj (-1 / L_jj), w = L⁻¹ v and B = L⁻¹ HP: v̄ = L⁻ᵀ w̄, HP̄ = L⁻ᵀ B̄, L̄ -= v̄ wᵀ + HP̄ Bᵀ.
      for (size_t i = M; i-- > 0;) {
        const double inv = 1.0 / k.L[i * M + i];
        double s = gw[i];
        for (size_t c = i + 1; c < M; ++c) s -= k.L[c * M + i] * gv[c];
        gv[i] = s * inv;
        for (size_t j = 0; j < N; ++j) {
          double b = gB[i * N + j];
          for (size_t c = i + 1; c < M; ++c) b -= k.L[c * M + i] * gHP[c * N + j];
          gHP[i * N + j] = b * inv;
        }
      }
      for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j <= i; ++j) {
          double s = i == j ? -1.0 / k.L[i * M + i] : 0.0;
          s -= gv[i] * k.w[j];
          for (size_t c = 0; c < N; ++c) s -= gHP[i * N + c] * k.B[j * N + c];
          gL[i * M + j] = s;
        }
      // S̄ from L̄ (the rule of backends/small_linalg.h, S read through its lower triangle).
      for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < M; ++j) {
          double s = 0;
          if (j <= i)
            for (size_t c = i; c < M; ++c) s += k.L[c * M + i] * gL[c * M + j];
          gS[i * M + j] = j > i ? 0.0 : (i == j ? 0.5 * s : s);
        }
      for (size_t row = 0; row < M; ++row)  // Y = Φ L⁻¹
        for (size_t j = M; j-- > 0;) {
          double s = gS[row * M + j];
          for (size_t c = j + 1; c < M; ++c) s -= gS[row * M + c] * k.L[c * M + j];
          gS[row * M + j] = s / k.L[j * M + j];
        }
      for (size_t col = 0; col < M; ++col)  // L⁻ᵀ Y
        for (size_t i = M; i-- > 0;) {
          double s = gS[i * M + col];
          for (size_t c = i + 1; c < M; ++c) s -= k.L[c * M + i] * gS[c * M + col];
          gS[i * M + col] = s / k.L[i * M + i];
        }
      for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < M; ++j)
          sym[i * M + j] = i > j ? gS[i * M + j] + gS[j * M + i] : i == j ? gS[i * M + i] : 0.0;
      // S = HP Hᵀ + diag(r);  HP = H Pp;  v = y - H mp.
      for (size_t a = 0; a < M; ++a) {
        gr[a] += sym[a * M + a];
        for (size_t c = 0; c < N; ++c) {
          double h = gHP[a * N + c], g = 0;
          for (size_t b = 0; b < M; ++b) {
            h += sym[a * M + b] * H[b * N + c];
            g += sym[b * M + a] * k.HP[b * N + c];
          }
          gHP[a * N + c] = h;
          gH[a * N + c] += g - gv[a] * k.mp[c];
        }
      }
      for (size_t o = 0; o < M; ++o)
        for (size_t c = 0; c < N; ++c) {
          double g = 0;
          for (size_t j = 0; j < N; ++j) g += gHP[o * N + j] * k.Pp[c * N + j];
          gH[o * N + c] += g;
        }
      for (size_t i = 0; i < N; ++i) {
        double s = gmp[i];
        for (size_t o = 0; o < M; ++o) s -= H[o * N + i] * gv[o];
        gmp[i] = s;
        for (size_t j = 0; j < N; ++j) {
          double g = gPp[i * N + j];
          for (size_t o = 0; o < M; ++o) g += H[o * N + i] * gHP[o * N + j];
          gPp[i * N + j] = g;
        }
      }
      // Pp = FP Fᵀ + Q;  FP = F P;  mp = F m.
      for (size_t i = 0; i < N; ++i)
        for (size_t c = 0; c < N; ++c) {
          double s = 0, g = 0;
          for (size_t j = 0; j < N; ++j) {
            s += gPp[i * N + j] * F[j * N + c];
            g += gPp[j * N + i] * k.FP[j * N + c];
          }
          gFP[i * N + c] = s;
          gF[i * N + c] += g;
          gQ[i * N + c] += gPp[i * N + c];
        }
      for (size_t i = 0; i < N; ++i)
        for (size_t c = 0; c < N; ++c) {
          double g = gmp[i] * k.m[c];
          for (size_t j = 0; j < N; ++j) g += gFP[i * N + j] * k.P[c * N + j];
          gF[i * N + c] += g;
        }
      for (size_t c = 0; c < N; ++c) {
        double s = 0;
        for (size_t i = 0; i < N; ++i) s += F[i * N + c] * gmp[i];
        gm[c] = s;
        for (size_t j = 0; j < N; ++j) {
          double g = 0;
          for (size_t i = 0; i < N; ++i) g += F[i * N + c] * gFP[i * N + j];
          gP[c * N + j] = g;
        }
      }
    }
    return ll;
  }
};

// Central differences of HandFilter::loglik against HandAdjoint's gradient, every entry of F, Q, H
// and r; the largest relative error.
double hand_adjoint_error(const Model& mod, int64_t n, const double* y, int64_t steps) {
  HandAdjoint a(mod, n, kObs);
  (void)a.value_and_grad(y, steps);
  double worst = 0;
  auto check = [&](std::vector<double> HandFilter::*param, const std::vector<double>& grad) {
    for (size_t i = 0; i < grad.size(); ++i) {
      HandFilter f(mod, n, kObs);
      const double h = 1e-5 * std::max(1.0, std::abs((f.*param)[i]));
      (f.*param)[i] += h;
      const double up = f.loglik(y, steps);
      (f.*param)[i] -= 2 * h;
      const double down = f.loglik(y, steps);
      const double fd = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(fd - grad[i]) / (1e-3 + std::abs(fd)));
    }
  };
  check(&HandFilter::F, a.gF);
  check(&HandFilter::Q, a.gQ);
  check(&HandFilter::H, a.gH);
  check(&HandFilter::r, a.gr);
  return worst;
}

void per_series_step(benchmark::State& state, int64_t series, int64_t steps) {
  state.counters["ns_per_series_step"] = benchmark::Counter(
      double(series * steps), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// args: state dimension, series, T
void BM_Kalman_HandWrittenForward(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = bench::kalman_model(n, 1, 8);
  HandFilter f(mod, n, kObs);
  const std::vector<double> y = randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3).to_vector();
  for (auto _ : state) {
    double total = 0;
    for (int64_t s = 0; s < series; ++s) total += f.loglik(y.data() + s * steps * kObs, steps);
    benchmark::DoNotOptimize(total);
  }
  per_series_step(state, series, steps);
}

void BM_Kalman_HandWrittenValueAndGrad(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = bench::kalman_model(n, 1, 8);
  const std::vector<double> y =
      randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3).to_vector();
  if (const double e = hand_adjoint_error(mod, n, y.data(), std::min<int64_t>(steps, 50)); e > 1e-5)
    state.SkipWithError(
        ("the hand-written adjoint disagrees with finite differences: " + std::to_string(e)).c_str());
  HandAdjoint a(mod, n, kObs);
  for (auto _ : state) {
    double total = 0;
    for (int64_t s = 0; s < series; ++s) total += a.value_and_grad(y.data() + s * steps * kObs, steps);
    benchmark::DoNotOptimize(total);
    benchmark::DoNotOptimize(a.gF.data());
  }
  per_series_step(state, series, steps);
}

void BM_Kalman_TenaxValueAndGrad(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = bench::kalman_model(n, series, steps);
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
  const Model mod = bench::kalman_model(n, series, steps);
  const TensorMap in = {{"y", randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3)}};
  for (auto _ : state) {
    Tensor v = mod.run("loglik", in);
    benchmark::DoNotOptimize(v.data_ptr());
  }
  per_series_step(state, series, steps);
}

// The statistician's outputs against the filter alone (one series, T steps, with the model's own
// pruning: each run computes only what that output needs). loglik is the filter; smoothed adds
// the backward r/N recursion to a filter that keeps its per-step quantities; forecast runs the
// filter and `horizon` (10) prediction steps; loglik_diffuse the filter with the augmented carry.
void BM_Kalman_Output(benchmark::State& state, const char* output) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  const Model mod = bench::kalman_model(n, series, steps);
  const TensorMap in = {{"y", randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3)}};
  for (auto _ : state) {
    Tensor v = mod.run(output, in);
    benchmark::DoNotOptimize(v.data_ptr());
  }
  per_series_step(state, series, steps);
}

// Standard errors at a point: the observed information by central differences of the exact
// gradient (2 k value-and-gradient evaluations for k coordinates) and its eigen-decomposition.
void BM_Kalman_StandardErrors(benchmark::State& state) {
  const int64_t n = state.range(0), series = state.range(1), steps = state.range(2);
  Model mod = bench::kalman_model(n, series, steps);
  const TensorMap in = {{"y", randn(Axes{{"series", series}, {"time", steps}, {"obs", kObs}}, 3)}};
  for (auto _ : state) {
    kalman::Uncertainty u = kalman::uncertainty(mod, in);
    benchmark::DoNotOptimize(u.information.data());
  }
  per_series_step(state, series, steps);
  state.counters["coordinates"] = double(mod.unconstrained_vector().size());
}

void output_configs(benchmark::internal::Benchmark* b) {
  for (int64_t n : {2, 4}) b->Args({n, 1, 1000});
  b->ArgNames({"state", "series", "T"});
}

void configs(benchmark::internal::Benchmark* b) {
  for (int64_t n : {2, 4, 8, 16})
    for (int64_t series : {1, 256}) b->Args({n, series, series == 1 ? 1000 : 200});
  b->Args({4, 1, 250});
  b->Args({4, 1, 4000});
  b->ArgNames({"state", "series", "T"});
}

BENCHMARK(BM_Kalman_HandWrittenForward)->Apply(configs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Kalman_HandWrittenValueAndGrad)->Apply(configs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Kalman_TenaxValueAndGrad)->Apply(configs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Kalman_TenaxForward)->Apply(configs)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Kalman_Output, filter, "loglik")->Apply(output_configs)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Kalman_Output, smoother, "smoothed")->Apply(output_configs)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Kalman_Output, forecast, "forecast")->Apply(output_configs)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Kalman_Output, diffuse, "loglik_diffuse")->Apply(output_configs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Kalman_StandardErrors)->Apply(output_configs)->Unit(benchmark::kMillisecond);

// `bench_kalman --count WHAT STATE REPS` runs WHAT REPS times on the bench model (one series,
// T = 1000) without Google Benchmark, for instruction counts under cachegrind
// (bench/count_instructions.sh): WHAT is a model output, value_and_grad or standard_errors.
int count(const std::string& what, int64_t n, long reps) {
  Model mod = bench::kalman_model(n, 1, 1000);
  const TensorMap in = {{"y", randn(Axes{{"series", 1}, {"time", 1000}, {"obs", kObs}}, 3)}};
  double sink = 0;
  for (long r = 0; r < reps; ++r) {
    if (what == "value_and_grad")
      sink += mod.value_and_grad("loglik", in).value.item();
    else if (what == "standard_errors")
      sink += kalman::uncertainty(mod, in).condition;
    else
      sink += sum(mod.run(what, in)).item();
  }
  benchmark::DoNotOptimize(sink);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--count") {
    try {
      return count(argv[2], std::stol(argv[3]), std::stol(argv[4]));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_kalman --count: %s\n", e.what());
      return 2;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
