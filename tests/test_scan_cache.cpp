// scan_cached (autodiff/scan_cache.h): a call reuses the plan and compiled step of an earlier one
// only where it may, and then gives what a fresh scan gives — values and gradients — under every
// reverse schedule, in both directions.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "op_check.h"
#include "tenax/autodiff/scan_cache.h"
#include "tenax/autodiff/scan_run.h"

namespace tenax {
namespace {

using detail::ScanCache;
using testing::mismatch;

// An RNN-like step with a matrix parameter w, a bias b and an untracked scale s, all closed over;
// a linear-algebra op and a comparison so that the step replays call by call (no fused loop).
ScanBody rnn(const Tensor& w, const Tensor& b, const Tensor& s) {
  return [w, b, s](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor h = tanh(dot(w, rename(c[0], "h", "k"), {"k"}) + x[0] * s + b);
    Tensor gated = where(greater(h, scalar(0.0)), h, h * 0.5);
    return std::make_pair(std::vector<Tensor>{gated + c[0] * 0.1}, std::vector<Tensor>{sum(gated * gated)});
  };
}

// The same step also returning its new state (y_1 = the new carry: a simulation's trajectory),
// whose checkpoints then share the output's buffer (autodiff/scan.cpp, shared_checkpoints).
ScanBody rnn_state(const Tensor& w, const Tensor& b, const Tensor& s) {
  return [inner = rnn(w, b, s)](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    auto [next, y] = inner(c, x);
    y.push_back(next[0]);
    return std::make_pair(next, y);
  };
}

struct Args {
  Tensor w, b, h0, xs, s;
};

Args args(uint64_t seed, int64_t steps = 12) {
  return {randn(Axes{{"h", 3}, {"k", 3}}, seed) * 0.5, randn(Axes{{"h", 3}}, seed + 1),
          randn(Axes{{"h", 3}}, seed + 2), randn(Axes{{"t", steps}, {"h", 3}}, seed + 3), scalar(0.8)};
}

struct Out {
  double value = 0;
  std::vector<Tensor> grads;  // w, b, h0, xs
};

// loss = sum(ys) + sum(carry²) and its gradients, through the cache (or a plain scan when null);
// with `state`, the step rnn_state and 0.3 sum of the states added.
Out run(const Args& a, const ScanOptions& o, const std::shared_ptr<ScanCache>& cache, bool state = false) {
  Tape tape;
  std::vector<Tensor> v{tape.watch(a.w), tape.watch(a.b), tape.watch(a.h0), tape.watch(a.xs)};
  const ScanBody body = state ? rnn_state(v[0], v[1], a.s) : rnn(v[0], v[1], a.s);
  ScanResult r = cache ? detail::scan_cached(body, {v[2]}, {v[3]}, "t", o, {v[0], v[1], a.s}, cache)
                       : scan(body, {v[2]}, {v[3]}, "t", o);
  Tensor loss = sum(r.ys[0]) + sum(r.carry[0] * r.carry[0]);
  if (state) loss = loss + sum(r.ys[1]) * 0.3;
  return {loss.item(), tape.gradient(loss, v)};
}

void expect_same(const Out& got, const Out& want, const std::string& what) {
  EXPECT_NEAR(got.value, want.value, 1e-13 * std::abs(want.value)) << what;
  for (size_t k = 0; k < want.grads.size(); ++k)
    EXPECT_LT(mismatch(got.grads[k], want.grads[k], 1e-13, 1e-14), 1.0) << what << ", gradient " << k;
}

std::vector<std::pair<std::string, ScanOptions>> schedules() {
  std::vector<std::pair<std::string, ScanOptions>> out;
  for (bool rev : {false, true}) {
    const std::string dir = rev ? " reverse" : "";
    ScanOptions kept;  // every carry and the steps' intermediates kept
    kept.reverse = rev;
    ScanOptions recompute = kept;
    recompute.residual_budget = 0;
    ScanOptions every3 = kept;
    every3.checkpoint_every = 3;
    ScanOptions bisect = kept;
    bisect.memory_budget = 5 * 3 * 8;  // 5 carries of 3 float64 for 12 steps: bisection
    out.insert(out.end(), {{"kept" + dir, kept},
                           {"recompute" + dir, recompute},
                           {"every 3" + dir, every3},
                           {"bisection" + dir, bisect}});
  }
  return out;
}

TEST(ScanCache, LaterCallsReuseTheCompiledStepAndGiveAFreshScansResults) {
  for (const auto& [name, o] : schedules()) {
    auto cache = std::make_shared<ScanCache>();
    for (uint64_t seed : {10, 20, 30}) {  // new parameters, initial carry and inputs each call
      const Args a = args(seed);
      expect_same(run(a, o, cache), run(a, o, nullptr), name + ", seed " + std::to_string(seed));
    }
    EXPECT_EQ(cache->misses(), 1) << name;
    EXPECT_EQ(cache->hits(), 2) << name;
  }
}

TEST(ScanCache, AReusedStepReturningItsStateGivesAFreshScansResults) {
  // A reused step starts its replay at step 0, where the checkpoint the state's output does not
  // write (the initial carry) is stored: every schedule, against a plain scan.
  for (const auto& [name, o] : schedules()) {
    auto cache = std::make_shared<ScanCache>();
    for (uint64_t seed : {10, 20, 30}) {
      const Args a = args(seed);
      expect_same(run(a, o, cache, true), run(a, o, nullptr, true), name + ", seed " + std::to_string(seed));
    }
    EXPECT_EQ(cache->hits(), 2) << name;
  }
}

TEST(ScanCache, ReusedScalarStepsRunAsFusedLoops) {
  // Single-element steps replay as one fused scalar loop (from step 1 when reused, instead of
  // step 3 after a trace), forwards and in every reverse schedule.
  for (const auto& [name, o] : schedules()) {
    auto cache = std::make_shared<ScanCache>();
    for (uint64_t seed : {10, 20, 30}) {
      const Tensor lam = scalar(0.5 + 0.1 * double(seed % 7)), u = randn(Axes{{"t", 12}}, seed);
      const Tensor x0 = scalar(0.3);
      auto go = [&](const std::shared_ptr<ScanCache>& c) {
        Tape tape;
        std::vector<Tensor> v{tape.watch(lam), tape.watch(x0), tape.watch(u)};
        const ScanBody body = [&v](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
          Tensor next = v[0] * carry[0] + x[0];
          return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{square(next)});
        };
        ScanResult r = c ? detail::scan_cached(body, {v[1]}, {v[2]}, "t", o, {v[0]}, c)
                         : scan(body, {v[1]}, {v[2]}, "t", o);
        Tensor loss = sum(r.ys[0]) + r.carry[0] * r.carry[0];
        return Out{loss.item(), tape.gradient(loss, v)};
      };
      expect_same(go(cache), go(nullptr), name + ", seed " + std::to_string(seed));
    }
    EXPECT_EQ(cache->hits(), 2) << name;
  }
}

TEST(ScanCache, AReusedStepReadsItsInputsInPlaceOrCopiesThemAsTheirLayoutAllows) {
  // A step whose loop calls read x_t (5000 elements: no fused loop) reads it in place from the
  // scanned tensor (StepProgram::read_x_in_place). Reused with inputs laid out otherwise (time
  // innermost, the same axes), it copies x_t into its buffer again, forwards and in reverse,
  // also where the kept bytes of the first pass left x_t out; then contiguous inputs once more,
  // and once with only the parameter's gradient (reverse programs built anew, still copying).
  // Every schedule, against a plain scan.
  const int64_t n = 5000;
  for (const auto& [name, o] : schedules()) {
    ScanOptions opt = o;
    if (opt.memory_budget > 0) opt.memory_budget = 5 * n * 8;
    auto cache = std::make_shared<ScanCache>();
    for (uint64_t seed : {10, 20, 30, 40}) {
      const Tensor lam = randn(Axes{{"j", n}}, seed) * 0.5, x0 = randn(Axes{{"j", n}}, seed + 1);
      const Tensor u = seed == 20 ? transpose(randn(Axes{{"j", n}, {"t", 12}}, seed + 2), {"t", "j"})
                                  : randn(Axes{{"t", 12}, {"j", n}}, seed + 2);
      auto go = [&](const std::shared_ptr<ScanCache>& c) {
        Tape tape;
        const bool all = seed != 40;
        std::vector<Tensor> v{tape.watch(lam), all ? tape.watch(x0) : x0, all ? tape.watch(u) : u};
        const ScanBody body = [&v](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
          Tensor next = tanh(v[0] * carry[0] + x[0] * carry[0] * 0.5);
          return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{sum(next * x[0])});
        };
        ScanResult r = c ? detail::scan_cached(body, {v[1]}, {v[2]}, "t", opt, {v[0]}, c)
                         : scan(body, {v[1]}, {v[2]}, "t", opt);
        Tensor loss = sum(r.ys[0]) + sum(r.carry[0] * r.carry[0]);
        return Out{loss.item(), tape.gradient(loss, all ? v : std::vector<Tensor>{v[0]})};
      };
      expect_same(go(cache), go(nullptr), name + ", seed " + std::to_string(seed));
    }
    EXPECT_EQ(cache->hits(), 3) << name;
  }
}

TEST(ScanCache, AReusedStepReadsItsCarryFromTheOutputOnlyWhenThereIsOne) {
  // A step returning its new state, solved by a tridiagonal solve: on a tape the carry is read in
  // place from the output's buffer (StepProgram::read_carries_from); a call with no tape has no
  // such buffer, and the reused program reads its carry buffer again (copied after each step);
  // then a tape again. Every schedule, against a plain scan: values, final carries, gradients.
  const int64_t n = 12;
  const Tensor lower = full(Axes{{"i", n}}, -0.3), upper = full(Axes{{"i", n}}, -0.4);
  const Tensor d = full(Axes{{"i", n}}, 1.5) + uniform(Axes{{"i", n}}, 9);
  const ScanBody body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
    Tensor next = tridiagonal_solve(lower, d, upper, carry[0], "i");
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next, sum(square(next - x[0]))});
  };
  for (const auto& [name, o] : schedules()) {
    ScanOptions opt = o;
    if (opt.memory_budget > 0) opt.memory_budget = 5 * n * 8;
    auto cache = std::make_shared<ScanCache>();
    for (uint64_t seed : {10, 20, 30, 40}) {
      const bool taped = seed != 20 && seed != 30;
      const Tensor x0 = randn(Axes{{"i", n}}, seed + 1), u = randn(Axes{{"t", 12}, {"i", n}}, seed + 2);
      auto go = [&](const std::shared_ptr<ScanCache>& c) {
        Tape tape;
        std::vector<Tensor> v{taped ? tape.watch(x0) : x0, taped ? tape.watch(u) : u};
        ScanResult r = c ? detail::scan_cached(body, {v[0]}, {v[1]}, "t", opt, {lower, d, upper}, c)
                         : scan(body, {v[0]}, {v[1]}, "t", opt);
        Tensor loss = sum(r.ys[1]) + sum(r.carry[0] * r.carry[0]) + sum(r.ys[0]) * 0.1;
        return Out{loss.item(), taped ? tape.gradient(loss, v) : std::vector<Tensor>{r.carry[0], r.ys[0]}};
      };
      expect_same(go(cache), go(nullptr), name + ", seed " + std::to_string(seed));
    }
    EXPECT_EQ(cache->hits(), 3) << name;
  }
}

TEST(ScanCache, AKeptStepDoesNotKeepACallsTensorsAlive) {
  // The program read its inputs in place and its carry from the output's buffer (read_x_in_place,
  // read_carries_from); once the call is done and the caller has dropped its inputs, output and
  // gradients, the cache keeps the program, not those (StepProgram::release_call).
  const int64_t n = 5000, steps = 200;
  const ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    Tensor next = tanh(c[0] * 0.9 + x[0] * 0.1);
    return std::make_pair(std::vector<Tensor>{next}, std::vector<Tensor>{next});
  };
  ScanOptions o;
  o.residual_budget = 0;  // nothing of the steps kept with the program
  auto cache = std::make_shared<ScanCache>();
  auto call = [&] {
    Tape tape;
    const Tensor x0 = tape.watch(randn(Axes{{"i", n}}, 4)),
                 xs = tape.watch(randn(Axes{{"t", steps}, {"i", n}}, 3));
    ScanResult r = detail::scan_cached(body, {x0}, {xs}, "t", o, {}, cache);
    const std::vector<Tensor> g = tape.gradient(sum(r.ys[0]), {x0, xs});
    return sum(g[0]).item() + sum(g[1]).item();
  };
  const int64_t before = allocator_stats().bytes_in_use;
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(std::isfinite(call()));
  EXPECT_EQ(cache->hits(), 1);
  // What the cache keeps: the program and its buffers (under 1 MB here), not the last call's
  // output, (steps + 1) · n · 8 = 8 MB, nor its 8 MB input or that input's adjoint.
  EXPECT_LT(allocator_stats().bytes_in_use - before, (steps + 1) * n * 8 / 4);
}

TEST(ScanCache, ReusedStepsMatchTheUnrolledLoop) {
  // Independent of scan itself: the third call (a reused step) against the loop on the tape.
  auto cache = std::make_shared<ScanCache>();
  for (uint64_t seed : {1, 2}) (void)run(args(seed), {}, cache);
  const Args a = args(3);
  const Out got = run(a, {}, cache);
  ASSERT_EQ(cache->hits(), 2);
  Tape tape;
  std::vector<Tensor> v{tape.watch(a.w), tape.watch(a.b), tape.watch(a.h0), tape.watch(a.xs)};
  std::vector<Tensor> c{v[2]};
  Tensor total = scalar(0.0);
  for (int t = 0; t < 12; ++t) {
    auto [next, y] = rnn(v[0], v[1], a.s)(c, {select(v[3], "t", t)});
    total = total + y[0];
    c = next;
  }
  Tensor loss = total + sum(c[0] * c[0]);
  expect_same(got, {loss.item(), tape.gradient(loss, v)}, "unrolled");
}

TEST(ScanCache, RetracesWhenItMayNotReuse) {
  auto cache = std::make_shared<ScanCache>();
  const ScanOptions o;
  Args a = args(1);
  (void)run(a, o, cache);
  int64_t misses = 1;
  auto check = [&](const Args& x, const ScanOptions& opt, const std::string& what, bool reuse) {
    expect_same(run(x, opt, cache), run(x, opt, nullptr), what);
    if (!reuse) ++misses;
    EXPECT_EQ(cache->misses(), misses) << what;
  };
  // An untracked capture with another value: its value is baked into the plan.
  a.s = scalar(0.3);
  check(a, o, "new scale", false);
  check(a, o, "same scale again", true);
  check(args(2, 20), o, "more steps", false);
  ScanOptions rev = o;
  rev.reverse = true;
  check(args(2, 20), rev, "other options", false);
  // Forward only (nothing tracked: the parameters are constants of the plan), then on a tape again.
  {
    const Args f = args(4, 20);
    auto forward = [&](const std::shared_ptr<ScanCache>& c) {
      const ScanBody body = rnn(f.w, f.b, f.s);
      return c ? detail::scan_cached(body, {f.h0}, {f.xs}, "t", rev, {f.w, f.b, f.s}, c).ys[0]
               : scan(body, {f.h0}, {f.xs}, "t", rev).ys[0];
    };
    EXPECT_EQ(forward(cache).to_vector(), forward(nullptr).to_vector());
    EXPECT_EQ(cache->misses(), ++misses);
    Args g = args(5, 20);
    check(g, rev, "on a tape after forward only", false);
  }
}

TEST(ScanCache, ACallWhileAnotherHoldsTheStepCompilesItsOwn) {
  // The first call's reverse pass has not run when the second call comes: the second may not
  // take the program the first still needs, and both gradients stay right.
  auto cache = std::make_shared<ScanCache>();
  const Args a = args(1), b = args(2);
  (void)run(a, {}, cache);  // compiled and given back
  Tape t1;
  std::vector<Tensor> v1{t1.watch(a.w), t1.watch(a.b), t1.watch(a.h0), t1.watch(a.xs)};
  ScanResult r1 =
      detail::scan_cached(rnn(v1[0], v1[1], a.s), {v1[2]}, {v1[3]}, "t", {}, {v1[0], v1[1], a.s}, cache);
  EXPECT_EQ(cache->hits(), 1);
  const Out second = run(b, {}, cache);  // the step is held by t1's scan: compiled afresh
  EXPECT_EQ(cache->misses(), 2);
  Tensor loss1 = sum(r1.ys[0]) + sum(r1.carry[0] * r1.carry[0]);
  const Out first{loss1.item(), t1.gradient(loss1, v1)};
  expect_same(first, run(a, {}, nullptr), "held");
  expect_same(second, run(b, {}, nullptr), "beside it");
}


// The same loss with the step run eagerly, step by step, on one tape: the unrolled loop, which
// no cache touches.
Out unrolled(const Args& a, const ScanOptions& o) {
  Tape tape;
  std::vector<Tensor> v{tape.watch(a.w), tape.watch(a.b), tape.watch(a.h0), tape.watch(a.xs)};
  const ScanBody body = rnn(v[0], v[1], a.s);
  std::vector<Tensor> carry{v[2]};
  Tensor ys = scalar(0.0);
  const int64_t n = a.xs.size("t");
  for (int64_t s = 0; s < n; ++s) {
    auto [next, y] = body(carry, {select(v[3], "t", o.reverse ? n - 1 - s : s)});
    carry = next;
    ys = ys + y[0];
  }
  Tensor loss = ys + sum(carry[0] * carry[0]);
  return {loss.item(), tape.gradient(loss, v)};
}

TEST(ScanBodyCache, PlainScansOfOneBodyReuseItsCompiledStepWithNewParametersAndInputs) {
  // An optimiser's loop: each call closes over new tracked parameters (another tape) and reads new
  // inputs; from the second call on the step compiled by the first replays, under every schedule,
  // and gives the unrolled loop's value and gradients.
  const std::shared_ptr<ScanCache> cache = detail::scan_body_cache(ScanBody(rnn(Tensor(), Tensor(), Tensor())).target_type());
  for (const auto& [name, o] : schedules()) {
    const int64_t hits = cache->hits();
    for (uint64_t seed : {10, 20, 30}) {
      const Args a = args(seed);
      expect_same(run(a, o, nullptr), unrolled(a, o), name + ", seed " + std::to_string(seed));
    }
    EXPECT_GE(cache->hits() - hits, 2) << name;
  }
}

TEST(ScanBodyCache, ADifferentConstantOrLengthIsNotReused) {
  // The untracked scale s is a constant of the traced step: a call closing over another value
  // traces and compiles afresh, as does a call with more steps.
  const std::shared_ptr<ScanCache> cache = detail::scan_body_cache(ScanBody(rnn(Tensor(), Tensor(), Tensor())).target_type());
  const ScanOptions o;
  Args a = args(40);
  (void)run(a, o, nullptr);
  const int64_t misses = cache->misses(), hits = cache->hits();
  a.s = scalar(0.7);
  expect_same(run(a, o, nullptr), unrolled(a, o), "another constant");
  EXPECT_EQ(cache->misses() - misses, 1);
  const Args longer = args(41, 15);
  expect_same(run(longer, o, nullptr), unrolled(longer, o), "more steps");
  EXPECT_EQ(cache->misses() - misses, 2);
  EXPECT_EQ(cache->hits(), hits);
  a.s = scalar(0.7);
  expect_same(run(a, o, nullptr), unrolled(a, o), "the kept constant again");  // kept: the last traced is 15 steps
  EXPECT_EQ(cache->misses() - misses, 3);
}

// x_t = a x_{t-1} + u_t from x_0 = init, loss = sum_t x_t^2 + x_T^2: value and gradients (a, init,
// u), by hand.
Out recurrence_by_hand(double a, double init, const std::vector<double>& u) {
  const size_t n = u.size();
  std::vector<double> x(n + 1, init);
  double loss = 0;
  for (size_t t = 0; t < n; ++t) {
    x[t + 1] = a * x[t] + u[t];
    loss += x[t + 1] * x[t + 1];
  }
  loss += x[n] * x[n];
  std::vector<double> ub(n);
  double xb = 2 * x[n], ab = 0;
  for (size_t t = n; t-- > 0;) {
    xb += 2 * x[t + 1];
    ub[t] = xb;
    ab += xb * x[t];
    xb *= a;
  }
  return {loss, {scalar(ab), scalar(xb), tensor(ub, Axes{{"t", static_cast<int64_t>(n)}})}};
}

TEST(ScanBodyCache, ReusedScalarStepsKeepTheirFusedLoopsForCallsLaidOutAlike) {
  // The fused forward and reverse loops a call built are kept with the compiled step and moved
  // onto a later call's tensors; a call whose input is laid out otherwise (a strided view) builds
  // its own. Every call against the recurrence's gradient by hand.
  const auto body_of = [](const Tensor& a) {
    return [a](const std::vector<Tensor>& c, const std::vector<Tensor>& u) {
      const Tensor x = a * c[0] + u[0];
      return std::make_pair(std::vector<Tensor>{x}, std::vector<Tensor>{x * x});
    };
  };
  using Body = decltype(body_of(Tensor()));
  const std::shared_ptr<ScanCache> cache = detail::scan_body_cache(typeid(Body));
  const int64_t n = 40;
  ScanOptions every3, recompute, reverse;
  every3.checkpoint_every = 3;
  recompute.residual_budget = 0;
  reverse.reverse = true;
  for (const auto& [name, o] : std::vector<std::pair<std::string, ScanOptions>>{
           {"default", {}}, {"every 3", every3}, {"recompute", recompute}, {"reverse", reverse}}) {
    for (int call = 0; call < 6; ++call) {
      const double a = 0.5 + 0.07 * call, init = 0.3 - 0.1 * call;
      const Tensor wide = randn(Axes{{"t", n}, {"k", 2}}, 50 + uint64_t(call));
      // Calls 3 and 4: u is every other element of `wide` (stride 2), the others contiguous.
      const Tensor u = call == 3 || call == 4 ? select(wide, "k", 1) : contiguous(select(wide, "k", 0));
      Tape tape;
      std::vector<Tensor> v{tape.watch(scalar(a)), tape.watch(scalar(init)), tape.watch(u)};
      ScanResult r = scan(Body(body_of(v[0])), {v[1]}, {v[2]}, "t", o);
      const Tensor loss = sum(r.ys[0]) + r.carry[0] * r.carry[0];
      std::vector<double> uv = u.to_vector();
      if (o.reverse) std::reverse(uv.begin(), uv.end());
      Out want = recurrence_by_hand(a, init, uv);
      if (o.reverse) {
        std::vector<double> ub = want.grads[2].to_vector();
        std::reverse(ub.begin(), ub.end());
        want.grads[2] = tensor(ub, Axes{{"t", n}});
      }
      expect_same({loss.item(), tape.gradient(loss, v)}, want, name + ", call " + std::to_string(call));
    }
    std::unique_ptr<ScanCache::Entry> e = cache->take();
    ASSERT_TRUE(e && e->program) << name;
    // Calls 1, 2 and 4 take the forward and reverse loops the call before them kept; call 0
    // builds them, and so do call 3 (u strided) and call 5 (u contiguous again: call 4 kept
    // strided ones). Every 3 steps: the reverse pass's forward and backward loops of the chunks.
    EXPECT_EQ(e->program->loops_reused(), name == "every 3" ? 9 : 6) << name;
    // The next schedule compiles its own step (other options); this one's is dropped.
  }
}

}  // namespace
}  // namespace tenax
