// Three programs as a user writes them in C++, each eager, compiled (compile / scan) and against a
// baseline measured in the same run:
//  - a chain of small ops: y <- y * c + c on 4-element tensors, 1000 times (2000 ops), forward and
//    forward + reverse; baseline: the chain and its adjoint written by hand;
//  - a Kalman filter (state 4, 2 observations, T = 1000) as a plain C++ loop of tensor ops, its
//    log-likelihood and gradient with respect to F, Q and r; eager, the loop inside compile(), the
//    step through scan from C++ (and its forward mode: jvp along one direction); baseline: the
//    same step through the JSON model;
//  - a scalar recurrence x_t = a x_{t-1} + u_t, loss = sum_t x_t^2, T = 1000, as a loop of select()
//    and arithmetic: eager, compiled, through scan (loss emitted per step and summed, or
//    accumulated in a carry; emitted also at T = 10 000, which with T = 1000 separates the cost of
//    a call from that of a step), through linear_recurrence; baseline: a hand-written adjoint.
// `bench_user_programs --count NAME REPS` runs one program REPS times without Google Benchmark,
// for instruction counts under cachegrind (bench/count_instructions.sh).
#include <benchmark/benchmark.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <tenax/tenax.h>

#include "hand_chain.h"
#include "kalman_bench_model.h"

namespace {

using namespace tenax;

// ---- the small-op chain ----------------------------------------------------------------------

constexpr int kChain = 1000;  // steps of 2 ops

Tensor chain(const Tensor& c) {
  Tensor y = c;
  for (int k = 0; k < kChain; ++k) y = y * c + c;
  return y;
}

const Tensor& chain_input() {
  static const Tensor c = tensor({0.5, 0.25, 0.125, 1.0}, "i");
  return c;
}

void chain_eager_forward() { benchmark::DoNotOptimize(chain(chain_input()).data_ptr()); }

void chain_eager_reverse() {
  auto g = grad([](const std::vector<Tensor>& p) { return sum(chain(p[0])); }, {chain_input()});
  benchmark::DoNotOptimize(g[0].data_ptr());
}

auto& compiled_chain() {
  static auto f = compile([](const Tensor& c) { return chain(c); });
  return f;
}

void chain_compiled_forward() { benchmark::DoNotOptimize(compiled_chain()(chain_input()).data_ptr()); }

void chain_compiled_reverse() {
  auto g = grad([](const std::vector<Tensor>& p) { return sum(compiled_chain()(p[0])); }, {chain_input()});
  benchmark::DoNotOptimize(g[0].data_ptr());
}

void chain_hand_written() {
  static std::vector<double> ys(4 * (kChain + 1));
  bench::hand_chain(ys, kChain);
}

// ---- the Kalman filter -----------------------------------------------------------------------

constexpr int64_t kState = 4, kSteps = 1000;
using bench::kObs;

// The model bench_kalman times (state 4, one series); the C++ programs read its parameters.
const Model& kalman_model() {
  static const Model m = bench::kalman_model(kState, 1, kSteps);
  return m;
}

struct KalmanParams {
  Tensor F, Q, r, H, m0, P0, eye, y;
};

// The model's parameters, and one series of observations.
const KalmanParams& kalman_params() {
  static const KalmanParams p = [] {
    const Model& m = kalman_model();
    return KalmanParams{m.parameter("F"),  m.parameter("Q"),  m.parameter("r"),
                        m.parameter("H"),  m.parameter("m0"), m.parameter("P0"),
                        m.parameter("eye_obs"), randn(Axes{{"time", kSteps}, {"obs", kObs}}, 3)};
  }();
  return p;
}

// One filter step, the same ops as the JSON model's scan body: (m, P, y_t) -> (m, P, maha, log L).
struct StepOut {
  Tensor m, P, maha, log_l;
};
StepOut kalman_step(const Tensor& F, const Tensor& Q, const Tensor& R, const Tensor& H, const Tensor& m,
                    const Tensor& P, const Tensor& yt) {
  const Tensor m_pred = dot(F, rename(m, "state", "state2"), {"state2"});
  const Tensor FP = dot(F, rename(P, {"state", "state2"}, {"state2", "state3"}), {"state2"});
  const Tensor P_pred = dot(FP, rename(F, {"state", "state2"}, {"state2", "state3"}), {"state3"}) + Q;
  const Tensor v = yt - dot(H, m_pred, {"state"});
  const Tensor HP = dot(H, P_pred, {"state"});
  const Tensor S = dot(HP, rename(H, {"obs", "state"}, {"obs2", "state2"}), {"state2"}) + R;
  const Tensor L = cholesky(S, "obs", "obs2");
  const Tensor w = triangular_solve(L, v, "obs", "obs2");
  const Tensor B = triangular_solve(L, HP, "obs", "obs2");
  const Tensor m_new = m_pred + rename(dot(B, w, {"obs2"}), "state2", "state");
  const Tensor P_upd = P_pred - dot(rename(B, "state2", "state"), B, {"obs2"});
  const Tensor P_new = (P_upd + rename(P_upd, {"state", "state2"}, {"state2", "state"})) * 0.5;
  return {m_new, P_new, dot(w, w, {"obs2"}), log(diagonal(L, "obs", "obs2"))};
}

// The log-likelihood as a plain loop over time: p = {F, Q, r, y}.
Tensor kalman_loop(const std::vector<Tensor>& p) {
  const KalmanParams& k = kalman_params();
  const Tensor R = k.eye * p[2];
  Tensor m = k.m0, P = k.P0, maha = scalar(0.0), norm = scalar(0.0);
  for (int64_t t = 0; t < kSteps; ++t) {
    StepOut s = kalman_step(p[0], p[1], R, k.H, m, P, select(p[3], "time", t));
    m = s.m;
    P = s.P;
    maha = maha + s.maha;
    norm = norm + sum(s.log_l);
  }
  return maha * -0.5 - norm - 0.91893853320467274178 * double(kSteps * kObs);
}

// The same through scan from C++: the step's results emitted per step and summed after.
Tensor kalman_scan(const std::vector<Tensor>& p) {
  const KalmanParams& k = kalman_params();
  const Tensor R = k.eye * p[2];
  const Tensor &F = p[0], &Q = p[1];
  const ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    StepOut s = kalman_step(F, Q, R, k.H, c[0], c[1], x[0]);
    return std::make_pair(std::vector<Tensor>{s.m, s.P}, std::vector<Tensor>{s.maha, s.log_l});
  };
  const ScanResult r = scan(body, {k.m0, k.P0}, {p[3]}, "time");
  return sum(r.ys[0]) * -0.5 - sum(r.ys[1]) - 0.91893853320467274178 * double(kSteps * kObs);
}

std::vector<Tensor> kalman_args() {
  const KalmanParams& k = kalman_params();
  return {k.F, k.Q, k.r, k.y};
}

void kalman_value_and_grad(const Function& f) {
  const std::vector<Tensor> a = kalman_args();
  auto [v, g] = value_and_grad([&](const std::vector<Tensor>& p) { return f({p[0], p[1], p[2], a[3]}); },
                               {a[0], a[1], a[2]});
  benchmark::DoNotOptimize(g[0].data_ptr());
}

void kalman_eager() { kalman_value_and_grad(kalman_loop); }

void kalman_compiled() {
  static auto f = compile([](const std::vector<Tensor>& p) { return kalman_loop(p); });
  kalman_value_and_grad(f);
}

void kalman_scan_cpp() { kalman_value_and_grad(kalman_scan); }

// Forward mode through the same scan: the log-likelihood's derivative along one direction of
// (F, Q, r) (compiled steps; TENAX_SCAN_TANGENT_PROGRAM=0 runs them op by op).
void kalman_scan_jvp() {
  static const std::vector<Tensor> dir = [] {
    const std::vector<Tensor> a = kalman_args();
    return std::vector<Tensor>{randn(a[0].axes(), 5) * 0.01, randn(a[1].axes(), 6) * 0.01, a[2] * 0.01};
  }();
  const std::vector<Tensor> a = kalman_args();
  auto [v, t] = jvp([&](const std::vector<Tensor>& p) { return kalman_scan({p[0], p[1], p[2], a[3]}); },
                    {a[0], a[1], a[2]}, dir);
  benchmark::DoNotOptimize(t.data_ptr());
}

Tensor series_input() {
  return tensor(kalman_params().y.to_vector({"time", "obs"}), Axes{{"series", 1}, {"time", kSteps}, {"obs", kObs}});
}

void kalman_json() {
  static const TensorMap in = {{"y", series_input()}};
  ModelGradient g = kalman_model().value_and_grad("loglik", in);
  benchmark::DoNotOptimize(g.grads[0].data_ptr());
}

// ---- the scalar recurrence -------------------------------------------------------------------

constexpr int64_t kRecSteps = 1000, kRecLongSteps = 10 * kRecSteps;

const Tensor& rec_u() {
  static const Tensor u = randn(Axes{{"t", kRecSteps}}, 11) * 0.1;
  return u;
}
// Ten times longer: with the T = 1000 run, what a call costs once and what a step costs.
const Tensor& rec_u_long() {
  static const Tensor u = randn(Axes{{"t", kRecLongSteps}}, 12) * 0.1;
  return u;
}

Tensor rec_loop(const std::vector<Tensor>& p) {
  Tensor x = scalar(0.0), loss = scalar(0.0);
  for (int64_t t = 0; t < kRecSteps; ++t) {
    x = p[0] * x + select(p[1], "t", t);
    loss = loss + x * x;
  }
  return loss;
}

Tensor rec_scan_emitted(const std::vector<Tensor>& p) {
  const Tensor& a = p[0];
  const ScanBody body = [&a](const std::vector<Tensor>& c, const std::vector<Tensor>& u) {
    const Tensor x = a * c[0] + u[0];
    return std::make_pair(std::vector<Tensor>{x}, std::vector<Tensor>{x * x});
  };
  return sum(scan(body, {scalar(0.0)}, {p[1]}, "t").ys[0]);
}

Tensor rec_scan_carried(const std::vector<Tensor>& p) {
  const Tensor& a = p[0];
  const ScanBody body = [&a](const std::vector<Tensor>& c, const std::vector<Tensor>& u) {
    const Tensor x = a * c[0] + u[0];
    return std::make_pair(std::vector<Tensor>{x, c[1] + x * x}, std::vector<Tensor>{});
  };
  return scan(body, {scalar(0.0), scalar(0.0)}, {p[1]}, "t").carry[1];
}

Tensor rec_linear_recurrence(const std::vector<Tensor>& p) {
  const Tensor x = linear_recurrence(p[0], p[1], "t");
  return sum(x * x);
}

void rec_value_and_grad(const Function& f) {
  auto [v, g] = value_and_grad(f, {scalar(0.9), rec_u()});
  benchmark::DoNotOptimize(g[0].data_ptr());
}

void rec_eager() { rec_value_and_grad(rec_loop); }
void rec_compiled() {
  static auto f = compile([](const std::vector<Tensor>& p) { return rec_loop(p); });
  rec_value_and_grad(f);
}
void rec_scan_emitted_run() { rec_value_and_grad(rec_scan_emitted); }
void rec_scan_emitted_long_run() {
  auto [v, g] = value_and_grad(rec_scan_emitted, {scalar(0.9), rec_u_long()});
  benchmark::DoNotOptimize(g[0].data_ptr());
}
void rec_scan_carried_run() { rec_value_and_grad(rec_scan_carried); }
void rec_linear_recurrence_run() { rec_value_and_grad(rec_linear_recurrence); }

// The hand-written adjoint: the forward keeps every x_t, the reverse walks back.
void rec_hand_written() {
  static const std::vector<double> u = rec_u().to_vector();
  static std::vector<double> xs = std::vector<double>(u.size());
  const double a = 0.9;
  double x = 0, loss = 0;
  for (size_t t = 0; t < u.size(); ++t) {
    x = a * x + u[t];
    xs[t] = x;
    loss += x * x;
  }
  double xb = 0, ab = 0;
  static std::vector<double> ub(u.size());
  for (size_t t = u.size(); t-- > 0;) {
    xb += 2 * xs[t];
    ub[t] = xb;
    ab += xb * (t > 0 ? xs[t - 1] : 0.0);
    xb *= a;
  }
  benchmark::DoNotOptimize(loss);
  benchmark::DoNotOptimize(ab);
  benchmark::DoNotOptimize(ub.data());
}

// ---- registration ----------------------------------------------------------------------------

struct Program {
  std::function<void()> run;
  double units;      // ops or steps per run
  const char* unit;  // "op" or "step"
};

const std::map<std::string, Program>& programs() {
  static const std::map<std::string, Program> p = {
      {"Chain_EagerForward", {chain_eager_forward, 2.0 * kChain, "op"}},
      {"Chain_EagerForwardReverse", {chain_eager_reverse, 2.0 * kChain, "op"}},
      {"Chain_CompiledForward", {chain_compiled_forward, 2.0 * kChain, "op"}},
      {"Chain_CompiledForwardReverse", {chain_compiled_reverse, 2.0 * kChain, "op"}},
      {"Chain_HandWritten", {chain_hand_written, 2.0 * kChain, "op"}},
      {"Kalman_EagerLoop", {kalman_eager, double(kSteps), "step"}},
      {"Kalman_CompiledLoop", {kalman_compiled, double(kSteps), "step"}},
      {"Kalman_ScanFromCpp", {kalman_scan_cpp, double(kSteps), "step"}},
      {"Kalman_ScanJvp", {kalman_scan_jvp, double(kSteps), "step"}},
      {"Kalman_JsonModel", {kalman_json, double(kSteps), "step"}},
      {"Recurrence_EagerLoop", {rec_eager, double(kRecSteps), "step"}},
      {"Recurrence_CompiledLoop", {rec_compiled, double(kRecSteps), "step"}},
      {"Recurrence_ScanEmitted", {rec_scan_emitted_run, double(kRecSteps), "step"}},
      {"Recurrence_ScanEmittedLong", {rec_scan_emitted_long_run, double(kRecLongSteps), "step"}},
      {"Recurrence_ScanCarried", {rec_scan_carried_run, double(kRecSteps), "step"}},
      {"Recurrence_LinearRecurrence", {rec_linear_recurrence_run, double(kRecSteps), "step"}},
      {"Recurrence_HandWritten", {rec_hand_written, double(kRecSteps), "step"}},
  };
  return p;
}

void run_program(benchmark::State& state, const Program& p) {
  p.run();  // traces and compiles outside the timing
  for (auto _ : state) p.run();
  state.counters[std::string("ns_per_") + p.unit] =
      benchmark::Counter(p.units, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The Kalman programs agree with each other before anything is timed.
bool kalman_programs_agree() {
  const std::vector<Tensor> a = kalman_args();
  const double loop = kalman_loop(a).item(), via_scan = kalman_scan(a).item();
  const TensorMap in = {{"y", series_input()}};
  const double json = kalman_model().run("loglik", in).item();
  return std::abs(loop - json) < 1e-9 * std::abs(json) && std::abs(via_scan - json) < 1e-9 * std::abs(json);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--count") == 0) {
    const auto it = programs().find(argv[2]);
    if (it == programs().end()) {
      std::cerr << "bench_user_programs: no program '" << argv[2] << "'\n";
      return 2;
    }
    const long reps = std::stol(argv[3]);
    for (long r = 0; r < reps; ++r) it->second.run();
    return 0;
  }
  if (!kalman_programs_agree()) {
    std::cerr << "bench_user_programs: the Kalman programs disagree\n";
    return 1;
  }
  for (const auto& [name, p] : programs())
    benchmark::RegisterBenchmark(name.c_str(), [&p = p](benchmark::State& s) { run_program(s, p); })
        ->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
