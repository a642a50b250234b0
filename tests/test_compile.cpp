// compile (autodiff/compile.h): a compiled function gives what its ops give run eagerly — values,
// gradients, batched VJPs, JVPs — on every call after the first, retraces only on a new signature,
// keeps a bounded cache, composes with scan and nmap, and says what went wrong where it cannot.
#include <cmath>
#include <vector>

#include "expect_message.h"
#include "op_check.h"

namespace tenax {
namespace {

using testing::mismatch;

// A small model step: a contraction, a nonlinearity, a comparison, a reduction.
std::vector<Tensor> step(const std::vector<Tensor>& a) {
  const Tensor h = tanh(dot(a[0], rename(a[1], "h", "k"), {"k"}) + a[2]);
  const Tensor gated = where(greater(h, scalar(0.0)), h, h * 0.5);
  return {gated, sum(gated * gated)};
}

std::vector<Tensor> args_for(uint64_t seed, int64_t n = 3) {
  return {randn(Axes{{"h", n}, {"k", n}}, seed), randn(Axes{{"h", n}}, seed + 1), randn(Axes{{"h", n}}, seed + 2)};
}

TEST(Compile, ReplaysGiveTheEagerValues) {
  const CompiledFunction f = compile(step);
  for (uint64_t s = 0; s < 4; ++s) {
    const std::vector<Tensor> a = args_for(10 * s);
    const std::vector<Tensor> got = f(a), want = step(a);
    ASSERT_EQ(got.size(), 2u);
    for (size_t k = 0; k < 2; ++k) EXPECT_LE(mismatch(got[k], want[k], 1e-14, 1e-14), 1.0) << "call " << s;
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().replays, 3);
  EXPECT_EQ(f.stats().programs, 1);
}

// A loop of small matrix steps, unrolled by the trace into a program many times longer than the
// replay's look-ahead: Cholesky factors and triangular solves (planned matrix calls), elementwise
// calls and sums, each step reading the last. Values and gradients as eager on every call.
Tensor matrix_loop_of(const std::vector<Tensor>& a, int steps) {
  Tensor x = a[0], p = a[1], loss = scalar(0.0);
  for (int k = 0; k < steps; ++k) {
    const Tensor l = cholesky(p + a[2], "r", "c");
    const Tensor z = rename(triangular_solve(l, x, "r", "c"), "c", "r");
    loss = loss + sum(z * z) + sum(l);
    x = tanh(z) + x * 0.5;
    p = p * 0.5 + a[2] * 0.25;
  }
  return loss;
}
Tensor matrix_loop(const std::vector<Tensor>& a) { return matrix_loop_of(a, 24); }
// Long enough that its programs take the handlers with the look-ahead prefetch (8 192 records or
// more; 24 steps take those without it).
Tensor long_matrix_loop(const std::vector<Tensor>& a) { return matrix_loop_of(a, 1000); }

void expect_compiled_matches_eager(Tensor (*loop)(const std::vector<Tensor>&)) {
  const CompiledFunction f = compile([loop](const std::vector<Tensor>& a) { return std::vector<Tensor>{loop(a)}; });
  for (uint64_t s = 0; s < 3; ++s) {
    const Tensor spd = tensor({{2.0 + 0.1 * double(s), 0.5}, {0.5, 1.0}}, "r", "c");
    const std::vector<Tensor> a = {randn(Axes{{"r", 2}}, 40 + s), spd, spd * 0.5};
    const auto [v, g] = value_and_grad([&](const std::vector<Tensor>& q) { return f(q)[0]; }, a);
    const auto [ve, ge] = value_and_grad(loop, a);
    EXPECT_LE(mismatch(v, ve, 1e-14, 1e-14), 1.0) << "call " << s;
    for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(mismatch(g[k], ge[k], 1e-12, 1e-13), 1.0) << "call " << s << " arg " << k;
  }
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(Compile, ALongLoopOfMatrixStepsReplaysTheEagerValuesAndGradients) { expect_compiled_matches_eager(matrix_loop); }

TEST(Compile, AVeryLongLoopReplaysTheEagerValuesAndGradientsWithTheLookAhead) {
  expect_compiled_matches_eager(long_matrix_loop);
}

TEST(Compile, OutputsAreTheCallersOwn) {
  const CompiledFunction f = compile(step);
  const std::vector<Tensor> a = args_for(1), b = args_for(2);
  const std::vector<Tensor> first = f(a);
  const double before = first[1].item();
  (void)f(b);
  EXPECT_EQ(first[1].item(), before);
}

TEST(Compile, FixedArityFormsReturnATensor) {
  auto f = compile([](const Tensor& x, const Tensor& y) { return sum(exp(x) * y); });
  const Tensor x = randn(Axes{{"i", 5}}, 3), y = randn(Axes{{"i", 5}}, 4);
  EXPECT_NEAR(f(x, y).item(), sum(exp(x) * y).item(), 1e-14);
  auto g = compile([](const std::vector<Tensor>& a) { return sum(a[0] * a[0]); });
  EXPECT_NEAR(g({x}).item(), sum(x * x).item(), 1e-14);
}

TEST(Compile, ANewSignatureRetracesAndTheCacheKeepsTheMostRecent) {
  CompileOptions o;
  o.cache_size = 2;
  const CompiledFunction f = compile(step, o);
  for (int64_t n : {2, 3, 2, 3, 4, 2}) (void)f(args_for(7, n));
  // 2, 3 traced; 2, 3 replayed; 4 traced (drops 2); 2 traced again.
  EXPECT_EQ(f.stats().traces, 4);
  EXPECT_EQ(f.stats().replays, 2);
  // Axis order is part of the signature; so is being tracked by a tape.
  std::vector<Tensor> a = args_for(7, 2);
  a[0] = contiguous(transpose(a[0], {"k", "h"}));
  (void)f(a);
  EXPECT_EQ(f.stats().traces, 5);
  (void)grad([&](const std::vector<Tensor>& p) { return f(p)[1]; }, a);
  EXPECT_EQ(f.stats().traces, 6);
}

TEST(Compile, GradientsEqualTheEagerOnesOnEveryCall) {
  const CompiledFunction f = compile(step);
  for (uint64_t s = 0; s < 3; ++s) {
    const std::vector<Tensor> a = args_for(100 + s);
    const auto [v, g] = value_and_grad([&](const std::vector<Tensor>& p) { return f(p)[1]; }, a);
    const auto [ve, ge] = value_and_grad([&](const std::vector<Tensor>& p) { return step(p)[1]; }, a);
    EXPECT_NEAR(v.item(), ve.item(), 1e-13);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(mismatch(g[k], ge[k], 1e-12, 1e-13), 1.0) << "call " << s << " arg " << k;
  }
  EXPECT_EQ(f.stats().traces, 1);
  // Only some arguments tracked: another signature, another reverse program.
  const std::vector<Tensor> a = args_for(5);
  const std::vector<Tensor> gw = grad([&](const std::vector<Tensor>& p) { return f({p[0], a[1], a[2]})[1]; }, {a[0]});
  const std::vector<Tensor> ew = grad([&](const std::vector<Tensor>& p) { return step({p[0], a[1], a[2]})[1]; }, {a[0]});
  EXPECT_LE(mismatch(gw[0], ew[0], 1e-12, 1e-13), 1.0);
}

TEST(Compile, BothOutputsCarryCotangentsAndJacobiansMatch) {
  const CompiledFunction f = compile(step);
  const std::vector<Tensor> a = args_for(42);
  // A loss reading both outputs, and an output reused twice.
  auto loss = [](const std::vector<Tensor>& o) { return sum(o[0] * o[0] * 3.0) + o[1] * o[1] + o[1]; };
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> g = grad([&](const std::vector<Tensor>& p) { return loss(f(p)); }, a);
    const std::vector<Tensor> e = grad([&](const std::vector<Tensor>& p) { return loss(step(p)); }, a);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(mismatch(g[k], e[k], 1e-12, 1e-13), 1.0) << k;
  }
  // Reverse-mode jacobian: the cotangents carry batch axes, replayed by a program built for them.
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> j = jacobian([&](const std::vector<Tensor>& p) { return f(p)[0]; }, a);
    const std::vector<Tensor> e = jacobian([&](const std::vector<Tensor>& p) { return step(p)[0]; }, a);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(mismatch(j[k], e[k], 1e-12, 1e-13), 1.0) << k;
  }
}

TEST(Compile, ForwardModeReplaysATangentProgram) {
  const CompiledFunction f = compile(step);
  const std::vector<Tensor> a = args_for(8);
  for (uint64_t call = 0; call < 3; ++call) {  // the later calls replay the tangent program
    std::vector<Tensor> tc = args_for(9 + call);
    if (call == 2) tc[1] = Tensor();  // another set of tangents: another tangent program
    const auto [v, d] = jvp([&](const std::vector<Tensor>& p) { return f(p)[1]; }, a, tc);
    const auto [ve, de] = jvp([&](const std::vector<Tensor>& p) { return step(p)[1]; }, a, tc);
    EXPECT_NEAR(v.item(), ve.item(), 1e-13);
    EXPECT_NEAR(d.item(), de.item(), 1e-12) << "call " << call;
  }
  JacobianOptions fwd;
  fwd.mode = JacobianOptions::Mode::forward;
  for (int call = 0; call < 2; ++call) {  // tangents with batch axes, per argument
    const std::vector<Tensor> j = jacobian([&](const std::vector<Tensor>& p) { return f(p)[0]; }, a, fwd);
    const std::vector<Tensor> e = jacobian([&](const std::vector<Tensor>& p) { return step(p)[0]; }, a);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(mismatch(j[k], e[k], 1e-12, 1e-13), 1.0) << k;
  }
  EXPECT_EQ(f.stats().inlined, 0);
  EXPECT_EQ(f.stats().traces, 1);  // one forward-mode signature
}

TEST(Compile, CallsRecordedOnOneTapeEachKeepTheirValues) {
  const CompiledFunction f = compile(step);
  const std::vector<Tensor> a = args_for(20), b = args_for(30);
  Tape tape;
  std::vector<Tensor> wa, wb;
  for (size_t k = 0; k < a.size(); ++k) {
    wa.push_back(tape.watch(a[k]));
    wb.push_back(tape.watch(b[k]));
  }
  const Tensor loss = f(wa)[1] * f(wb)[1];
  std::vector<Tensor> wrt = wa;
  wrt.insert(wrt.end(), wb.begin(), wb.end());
  const std::vector<Tensor> g = tape.gradient(loss, wrt);
  const std::vector<Tensor> e = grad(
      [](const std::vector<Tensor>& p) {
        return step({p[0], p[1], p[2]})[1] * step({p[3], p[4], p[5]})[1];
      },
      wrt);
  for (size_t k = 0; k < wrt.size(); ++k) EXPECT_LE(mismatch(g[k], e[k], 1e-12, 1e-13), 1.0) << k;
  EXPECT_EQ(f.stats().programs, 2);  // the second call found the first's buffers held
}

TEST(Compile, InsideAScanBodyTheEnclosingTraceCompilesIt) {
  auto cell = compile([](const Tensor& c, const Tensor& x) { return tanh(c * 0.9 + x); });
  const Tensor xs = randn(Axes{{"t", 6}, {"h", 3}}, 5);
  auto run = [&](bool compiled) {
    return [&, compiled](const std::vector<Tensor>& p) {
      ScanBody body = [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        const Tensor n = compiled ? cell(c[0], x[0]) : tanh(c[0] * 0.9 + x[0]);
        return std::make_pair(std::vector<Tensor>{n}, std::vector<Tensor>{});
      };
      return sum(scan(body, {p[0]}, {xs}, "t").carry[0]);
    };
  };
  const std::vector<Tensor> h0 = {randn(Axes{{"h", 3}}, 6)};
  const auto [v, g] = value_and_grad(run(true), h0);
  const auto [ve, ge] = value_and_grad(run(false), h0);
  EXPECT_NEAR(v.item(), ve.item(), 1e-13);
  EXPECT_LE(mismatch(g[0], ge[0], 1e-12, 1e-13), 1.0);
  EXPECT_EQ(cell.stats().traces, 0);
  EXPECT_GT(cell.stats().inlined, 0);
}

TEST(Compile, UnderNmapEachSliceGetsTheSliceFunction) {
  auto f = compile([](const Tensor& x, const Tensor& w) { return sum(tanh(x * w)); });
  const Tensor x = randn(Axes{{"b", 4}, {"i", 3}}, 11), w = randn(Axes{{"i", 3}}, 12);
  const Tensor got = nmap([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); }, {"b"}, {x, w});
  for (int64_t b = 0; b < 4; ++b)
    EXPECT_NEAR(select(got, "b", b).item(), sum(tanh(select(x, "b", b) * w)).item(), 1e-14) << b;
  // Gradient through the mapped call.
  const std::vector<Tensor> g = grad(
      [&](const std::vector<Tensor>& p) {
        return sum(nmap([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); }, {"b"}, {p[0], p[1]}));
      },
      {x, w});
  const std::vector<Tensor> e = grad([](const std::vector<Tensor>& p) { return sum(tanh(p[0] * p[1])); }, {x, w});
  for (size_t k = 0; k < 2; ++k) EXPECT_LE(mismatch(g[k], e[k], 1e-12, 1e-13), 1.0) << k;
}

TEST(Compile, OutputsThatAreArgumentsViewsConstantsOrBooleans) {
  const Tensor k = tensor({1.0, 2.0}, "j");
  auto f = compile([&k](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{a[0], transpose(a[1], {"j", "i"}), k * 2.0, greater(a[0], scalar(0.0)),
                               sum(a[1] * a[0])};
  });
  for (uint64_t s = 0; s < 2; ++s) {
    const Tensor x = randn(Axes{{"i", 3}}, 50 + s), y = randn(Axes{{"i", 3}, {"j", 2}}, 60 + s);
    const std::vector<Tensor> got = f({x, y});
    ASSERT_EQ(got.size(), 5u);
    EXPECT_EQ(got[0].to_vector(), x.to_vector());
    EXPECT_EQ(got[1].axes().name(0), Name("j"));
    EXPECT_LE(mismatch(got[1], y, 1e-15, 1e-15), 1.0);
    EXPECT_EQ(got[2].to_vector(), std::vector<double>({2.0, 4.0}));
    EXPECT_EQ(got[3].dtype(), DType::b8);
    // d/dx and d/dy of sum(out0 * 3) + sum(out1 * out1) + out4, through the compiled reverse.
    auto loss = [&](bool compiled) {
      return [&, compiled](const std::vector<Tensor>& p) {
        const std::vector<Tensor> o =
            compiled ? f(p)
                     : std::vector<Tensor>{p[0], transpose(p[1], {"j", "i"}), k * 2.0, Tensor(), sum(p[1] * p[0])};
        return sum(o[0] * 3.0) + sum(o[1] * o[1]) + o[4] + sum(o[2]);
      };
    };
    const std::vector<Tensor> g = grad(loss(true), {x, y}), e = grad(loss(false), {x, y});
    for (size_t a = 0; a < 2; ++a) EXPECT_LE(mismatch(g[a], e[a], 1e-13, 1e-13), 1.0) << "call " << s << " arg " << a;
  }
}

TEST(Compile, InsideMapEachChunkReplays) {
  auto f = compile([](const Tensor& x, const Tensor& w) { return tanh(x * w) * x; });
  const Tensor x = randn(Axes{{"b", 10}, {"i", 3}}, 13), w = randn(Axes{{"i", 3}}, 14);
  MapOptions o;
  o.batch_size = 4;  // chunks of 4, 4 and 2: two signatures
  o.parallel_chunks = 2;
  auto loss = [&](bool compiled) {
    return [&, compiled](const std::vector<Tensor>& p) {
      auto g = [&](const std::vector<Tensor>& a) {
        return std::vector<Tensor>{compiled ? f(a[0], a[1]) : tanh(a[0] * a[1]) * a[0]};
      };
      return sum(map(g, "b", {p[0], p[1]}, o)[0]);
    };
  };
  const auto [v, g] = value_and_grad(loss(true), {x, w});
  const auto [ve, ge] = value_and_grad(loss(false), {x, w});
  EXPECT_NEAR(v.item(), ve.item(), 1e-13);
  for (size_t k = 0; k < 2; ++k) EXPECT_LE(mismatch(g[k], ge[k], 1e-12, 1e-13), 1.0) << k;
  EXPECT_GT(f.stats().replays, 0);
}

// A function calling scan, map or custom_vjp runs op by op; its scan keeps the compiled step of
// its body from one call to the next (the scan body cache), and values and gradients are eager's.
TEST(Compile, AFunctionCallingScanMapOrCustomVjpRunsOpByOp) {
  const Tensor xs = randn(Axes{{"t", 8}, {"h", 3}}, 21);
  auto filter = [&](const Tensor& w, const Tensor& h0) {
    ScanBody body = [&w](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      const Tensor h = tanh(c[0] * w + x[0]);
      return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{sum(h * h)});
    };
    const ScanResult r = scan(body, {h0}, {xs}, "t");
    auto scale = [](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * 2.0}; };
    const Tensor doubled = map(scale, "t", {r.ys[0]})[0];
    const Tensor twice = custom_vjp(
        "twice", [](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * 2.0}; },
        [](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
          return std::vector<Tensor>{g[0] * 2.0};
        },
        {sum(doubled)})[0];
    return twice + sum(r.carry[0]);
  };
  auto f = compile(filter);
  for (uint64_t s = 0; s < 3; ++s) {
    const std::vector<Tensor> a = {randn(Axes{{"h", 3}}, 30 + s) * 0.5, randn(Axes{{"h", 3}}, 40 + s)};
    const auto [v, g] = value_and_grad([&](const std::vector<Tensor>& p) { return f(p[0], p[1]); }, a);
    const auto [ve, ge] = value_and_grad([&](const std::vector<Tensor>& p) { return filter(p[0], p[1]); }, a);
    EXPECT_NEAR(v.item(), ve.item(), 1e-12);
    for (size_t k = 0; k < 2; ++k) EXPECT_LE(mismatch(g[k], ge[k], 1e-12, 1e-13), 1.0) << "call " << s << " arg " << k;
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().eager, 3);
  EXPECT_EQ(f.stats().replays, 0);
}

TEST(Compile, ErrorsSayWhatToDo) {
  auto reads = compile([](const Tensor& x) { return x * x.item(); });
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)reads(scalar(2.0)); }),
                 "[item] a compiled function reads the value of a tensor computed from its inputs");
  Tape tape;
  const Tensor w = tape.watch(scalar(3.0));
  auto closes = compile([&](const Tensor& x) { return x * w; });
  EXPECT_MESSAGE(testing::error_message<AutodiffError>([&] { (void)closes(tape.watch(scalar(2.0))); }),
                 "[compiled function] the function reads a tensor () that the tape tracks but that is not among its "
                 "arguments");
  CompileOptions once;
  once.max_traces = 1;
  once.name = "kalman";
  auto f = compile([](const Tensor& x) { return x * 2.0; }, once);
  (void)f(randn(Axes{{"t", 4}}, 1));
  (void)f(randn(Axes{{"t", 4}}, 2));
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)f(randn(Axes{{"t", 5}}, 1)); }),
                 "[kalman] a call would trace the function again but max_traces is 1; argument 0 is (t=5) float64 on "
                 "cpu where it was (t=4) float64 on cpu");
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)f(Tensor()); }), "[kalman] argument 0 is undefined");
  auto none = compile([](const std::vector<Tensor>&) { return std::vector<Tensor>{}; });
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)none({scalar(1.0)}); }),
                 "[compiled function] the function returned no tensors");
  // Inside a scan body the enclosing trace cannot run op by op: a scan there is an Error.
  auto with_scan = compile([](const Tensor& x) {
    ScanOptions o;
    o.length = 3;
    ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
      return std::make_pair(std::vector<Tensor>{c[0] * 2.0}, std::vector<Tensor>{});
    };
    return scan(body, {x}, {}, "t", o).carry[0];
  });
  ScanBody outer = [&](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
    return std::make_pair(std::vector<Tensor>{with_scan(c[0])}, std::vector<Tensor>{});
  };
  ScanOptions three;
  three.length = 3;
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)scan(outer, {scalar(1.0)}, {}, "t", three); }),
                 "[scan] inside a scan body is not supported yet");
  ScanBody body = [](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
    auto times = [](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * a[1]}; };
    return std::make_pair(std::vector<Tensor>{c[0] + sum(map(times, "i", {x[0], c[0]})[0])}, std::vector<Tensor>{});
  };
  EXPECT_MESSAGE(
      testing::error_message<Error>([&] { (void)scan(body, {scalar(1.0)}, {randn(Axes{{"t", 3}, {"i", 2}}, 1)}, "t"); }),
      "[map] inside a scan body is not supported yet");
  // A kernel failing in a replay names the kernel and the call; the function stays usable.
  auto chol = compile([](const Tensor& a) { return sum(cholesky(a, "r", "c")); });
  const Tensor spd = tensor({{2.0, 0.5}, {0.5, 1.0}}, "r", "c"), indefinite = tensor({{1.0, 2.0}, {2.0, 1.0}}, "r", "c");
  const double good = chol(spd).item();
  EXPECT_MESSAGE(testing::error_message<NumericError>([&] { (void)chol(indefinite); }),
                 "[cholesky] at a call of a compiled function: the matrix at batch index 0 is not positive definite");
  EXPECT_EQ(chol(spd).item(), good);
  CompileOptions zero;
  zero.cache_size = 0;
  EXPECT_MESSAGE(testing::error_message<Error>([&] { (void)compile(step, zero); }), "cache_size must be at least 1");
}

}  // namespace
}  // namespace tenax
