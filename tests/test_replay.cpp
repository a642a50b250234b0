// Replay planning of captured kernel programs (core/ops/capture.h): copy forwarding, contraction
// fusion and the inline calls' planned loops, each against the program as written or the kernels'
// own arithmetic, bit for bit, and a capture rule for every kernel. (The fused scalar loops:
// test_scalar_loop.cpp; whole scans that replay through them: test_scan.cpp.)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "op_check.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/inline_call.h"
#include "tenax/core/ops/scalar_loop.h"

namespace tenax {
namespace {

// Copy forwarding (KernelProgram::allow_copy_forwarding): a replay reads a copy's source instead
// of a temporary only this program holds, and keeps the copy where the source changes before the
// temporary's last read. The replays run after the inputs changed, so a stale buffer would show.
TEST(CopyForwarding, ReadsTheSourceOnlyWhereThatGivesTheSameValues) {
  const Tensor s = tensor({1.0, 2.0, 3.0, 4.0}, "i"), w = tensor({0.5, -1.0, 2.0, 3.0}, "i");
  const Tensor out = zeros(Axes{{"i", 4}});
  detail::KernelProgram forwarded;
  detail::capture_into(forwarded, [&] {
    const Tensor t = detail::copy_of(s);  // a temporary: only the program holds it afterwards
    detail::copy_into(out, t * w + t);
  });
  forwarded.allow_copy_forwarding();
  detail::copy_into(s, tensor({-2.0, 5.0, 0.25, 7.0}, "i"));
  forwarded.run("test", 0);
  EXPECT_EQ(forwarded.forwarded_copies(), 1U);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{-3.0, 0.0, 0.75, 28.0}));

  // The source is overwritten after the copy and before the temporary is read: the copy stays.
  detail::KernelProgram kept;
  detail::capture_into(kept, [&] {
    const Tensor t = detail::copy_of(s);
    detail::copy_into(s, w);
    detail::copy_into(out, t * w);
  });
  kept.allow_copy_forwarding();
  detail::copy_into(s, tensor({1.0, 2.0, 3.0, 4.0}, "i"));
  kept.run("test", 0);
  EXPECT_EQ(kept.forwarded_copies(), 0U);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0.5, -2.0, 6.0, 12.0}));
  EXPECT_EQ(s.to_vector(), w.to_vector());
}

// The threaded replay (core/ops/threaded_replay.cpp): a chain of small calls, each reading what
// the one before it wrote (through a, b or both), at every length with a handler of its own (1,
// 2, 4, 8, 16; 3 runs its own loop), a scalar broadcast, copies: replayed after the inputs
// changed, the outputs hold the eager ops' bits, and the calls at lengths 1 and 4 did read the
// previous result from registers. Both builds of the handlers: the AVX2 one where the CPU has it,
// the baseline's under TENAX_CPU_AVX2=0 (test_replay_baseline).
TEST(ThreadedReplay, CallsReadingThePreviousResultGiveTheEagerBits) {
  for (const int64_t n : {1, 2, 3, 4, 8, 16}) {
    SCOPED_TRACE("length " + std::to_string(n));
    const Tensor x = randn(Axes{{"i", n}}, 3), w = randn(Axes{{"i", n}}, 4), s = scalar(0.75);
    auto chain = [&] {
      const Tensor y1 = x * w;
      const Tensor y2 = y1 + w;   // a: the previous result
      const Tensor y3 = y2 * y2;  // a and b
      const Tensor y4 = w - y3;   // b
      const Tensor y5 = -y4;      // a (one operand)
      const Tensor y6 = y5 * s;   // a scalar broadcast
      const Tensor y7 = detail::copy_of(y6);
      return y7 + y7 * x;
    };
    const Tensor out = zeros(Axes{{"i", n}});
    detail::KernelProgram program;
    detail::capture_into(program, [&] { detail::copy_into(out, chain()); });
    detail::copy_into(x, randn(Axes{{"i", n}}, 5));
    detail::copy_into(w, randn(Axes{{"i", n}}, 6));
    detail::copy_into(s, scalar(-1.25));
    program.run("test", 0);
    const std::vector<double> got = out.to_vector(), want = chain().to_vector();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(std::memcmp(&got[size_t(i)], &want[size_t(i)], sizeof(double)), 0) << "element " << i;
    if (n == 1 || n == 4) {
      EXPECT_GE(program.previous_result_reads(), 4u);
    } else if (n == 3) {
      EXPECT_EQ(program.previous_result_reads(), 0u);
    }
  }
}

// Lowering swaps adjacent calls that commute where more calls then read the previous result:
// y3 reads y1 but follows y2, which reads neither; after the swap y3 and the copy of y2 take their
// operands from registers (two reads; none in the recorded order), with the recorded order's bits.
TEST(ThreadedReplay, IndependentCallsSwapToReadThePreviousResult) {
  const Tensor x = randn(Axes{{"i", 4}}, 7), w = randn(Axes{{"i", 4}}, 8), v = randn(Axes{{"i", 4}}, 9);
  auto calls = [&] {
    const Tensor y1 = x * w;
    const Tensor y2 = v + w;
    const Tensor y3 = y1 * x;
    return std::pair{y2, y3};
  };
  const Tensor out2 = zeros(Axes{{"i", 4}}), out3 = zeros(Axes{{"i", 4}});
  detail::KernelProgram program;
  detail::capture_into(program, [&] {
    const auto [y2, y3] = calls();
    detail::copy_into(out2, y2);
    detail::copy_into(out3, y3);
  });
  detail::copy_into(x, randn(Axes{{"i", 4}}, 10));
  detail::copy_into(v, randn(Axes{{"i", 4}}, 11));
  program.run("test", 0);
  EXPECT_EQ(program.previous_result_reads(), 2u);
  const auto [y2, y3] = calls();
  for (const auto& [got, want] : {std::pair{out2, y2}, std::pair{out3, y3}}) {
    const std::vector<double> g = got.to_vector(), e = want.to_vector();
    EXPECT_EQ(std::memcmp(g.data(), e.data(), g.size() * sizeof(double)), 0);
  }
}

// The same for a compiled function's reverse program, whose calls accumulate (acc, acc_neg,
// mul_acc) into adjoints the call before wrote: its gradient holds the eager gradient's bits.
TEST(ThreadedReplay, ACompiledReverseProgramGivesTheEagerGradientsBits) {
  auto f = [](const std::vector<Tensor>& p) {
    Tensor y = p[0];
    for (int k = 0; k < 6; ++k) y = y * p[1] - (p[0] - y * y);
    return sum(y);
  };
  for (const int64_t n : {1, 4}) {
    SCOPED_TRACE("length " + std::to_string(n));
    const CompiledFunction compiled =
        compile([&f](const std::vector<Tensor>& p) { return std::vector<Tensor>{f(p)}; });
    auto compiled_loss = [&compiled](const std::vector<Tensor>& p) { return compiled(p)[0]; };
    for (uint64_t call = 0; call < 3; ++call) {
      const std::vector<Tensor> p = {randn(Axes{{"i", n}}, 10 + call) * 0.5,
                                     randn(Axes{{"i", n}}, 20 + call) * 0.5};
      const std::vector<Tensor> got = grad(compiled_loss, p), want = grad(f, p);
      for (size_t k = 0; k < 2; ++k) {
        const std::vector<double> g = got[k].to_vector(), w = want[k].to_vector();
        for (int64_t i = 0; i < n; ++i)
          EXPECT_EQ(std::memcmp(&g[size_t(i)], &w[size_t(i)], sizeof(double)), 0)
              << "call " << call << " argument " << k;
      }
    }
    EXPECT_GE(compiled.stats().replays, 2);
  }
}

// z(i, j) += Σ_k x(i, k) y(k, j), through the kernel table (what reverse rules record: a
// contraction accumulating into its output).
void accumulate_product(const Tensor& z, const Tensor& x, const Tensor& y) {
  detail::ContractArgs a;
  a.x = x.data_ptr();
  a.y = y.data_ptr();
  a.z = z.data_ptr();
  a.accumulate = true;
  a.m.rank = a.n.rank = a.k.rank = 1;
  a.m.sizes[0] = x.size("i");
  a.n.sizes[0] = y.size("j");
  a.k.sizes[0] = x.size("k");
  a.m.x[0] = x.stride("i");
  a.m.z[0] = z.stride("i");
  a.n.y[0] = y.stride("j");
  a.n.z[0] = z.stride("j");
  a.k.x[0] = x.stride("k");
  a.k.y[0] = y.stride("k");
  detail::kernels(z.device()).contract[0](a);
}

// Contraction fusion (KernelProgram::allow_copy_forwarding): a contraction takes in the copy, add
// or subtraction next to it where that gives the same bits, and nowhere else. The programs are
// captured twice, one replayed as captured; both run after every input changed. Sizes 2, 3, 5
// and 8 reach the vector row, scalar and (above 4) medium kernels.
TEST(ContractionFusion, TakesInTheNeighbouringCallOnlyWhereThatGivesTheSameBits) {
  for (const int64_t n : {2, 3, 5, 8}) {
    SCOPED_TRACE("size " + std::to_string(n));
    const Axes ij{{"i", n}, {"j", n}};
    const Tensor x = zeros(Axes{{"i", n}, {"k", n}}), y = zeros(Axes{{"k", n}, {"j", n}}), s = zeros(ij),
                 w = zeros(ij);
    std::vector<Tensor> outs;
    for (int k = 0; k < 8; ++k) outs.push_back(zeros(ij));
    auto step = [&] {
      detail::copy_into(outs[0], s + dot(x, y, {"k"}));  // fused: o = S + x·y
      detail::copy_into(outs[1], s - dot(x, y, {"k"}));  // fused: o = S - x·y
      detail::copy_into(outs[2], dot(x, y, {"k"}));      // fused: the product written into outs[2]
      const Tensor d = detail::copy_of(s);               // fused: D = S + x·y, the copy dropped
      accumulate_product(d, x, y);
      detail::copy_into(outs[3], d);
      detail::copy_into(outs[4], dot(x, y, {"k"}) - s);  // T - S: no such form
      const Tensor t = dot(x, y, {"k"});                 // T read twice
      detail::copy_into(outs[5], s + t);
      detail::copy_into(outs[6], t * s);
      const Tensor u = dot(x, y, {"k"});  // x written between the product and the add
      detail::copy_into(x, x * rename(s, "j", "k"));
      detail::copy_into(outs[7], s + u);
      const Tensor e = detail::copy_of(s);  // S written between the copy and the accumulation
      detail::copy_into(s, w);
      accumulate_product(e, x, y);
      detail::copy_into(outs[7], outs[7] + e);
    };
    std::vector<StoragePtr> known;
    for (const Tensor* t : {&x, &y, &s, &w}) known.push_back(t->storage());
    for (const Tensor& t : outs) known.push_back(t.storage());
    detail::KernelProgram fused, plain;
    detail::capture_into(fused, step);
    detail::capture_into(plain, step);
    fused.allow_copy_forwarding(nullptr, {}, known);
    auto load = [&](uint64_t seed) {
      detail::copy_into(x, randn(x.axes(), seed));
      detail::copy_into(y, randn(y.axes(), seed + 1));
      detail::copy_into(s, randn(ij, seed + 2));
      detail::copy_into(w, randn(ij, seed + 3));
      for (const Tensor& o : outs) detail::copy_into(o, full(ij, 99.0));
    };
    for (uint64_t seed = 1; seed < 4; ++seed) {
      load(seed);
      plain.run("test", 0);
      std::vector<std::vector<double>> expected;
      for (const Tensor& o : outs) expected.push_back(o.to_vector());
      load(seed);
      fused.run("test", 0);
      for (size_t k = 0; k < outs.size(); ++k) EXPECT_EQ(outs[k].to_vector(), expected[k]) << "output " << k;
    }
    EXPECT_EQ(fused.fused_contractions(), 4U);
    EXPECT_EQ(plain.fused_contractions(), 0U);
    if (n != 2) continue;

    // Against values worked by hand (small integers: every product and sum exact).
    detail::copy_into(x, tensor({{1.0, 2.0}, {3.0, 4.0}}, "i", "k"));
    detail::copy_into(y, tensor({{5.0, 6.0}, {7.0, 8.0}}, "k", "j"));
    detail::copy_into(s, tensor({{1.0, -1.0}, {2.0, 0.5}}, "i", "j"));
    fused.run("test", 0);
    // x·y = [[19, 22], [43, 50]]
    EXPECT_EQ(outs[0].to_vector(), (std::vector<double>{20.0, 21.0, 45.0, 50.5}));
    EXPECT_EQ(outs[1].to_vector(), (std::vector<double>{-18.0, -23.0, -41.0, -49.5}));
    EXPECT_EQ(outs[2].to_vector(), (std::vector<double>{19.0, 22.0, 43.0, 50.0}));
    EXPECT_EQ(outs[3].to_vector(), (std::vector<double>{20.0, 21.0, 45.0, 50.5}));
    EXPECT_EQ(outs[4].to_vector(), (std::vector<double>{18.0, 23.0, 41.0, 49.5}));
  }
}

// KernelProgram::read_in_place (what a scan does with x_t and carries, autodiff/scan_program.cpp):
// the loop calls that read a buffer, and the operands a tridiagonal solve only reads, read the same
// bytes of a moving slice instead, at the replay's index; where a call touching the buffer cannot
// move (it writes it, reads it twice, is flat, or does not say what it reads or where it keeps
// its pointers), nothing changes. Large enough (> kFlatLimit elements) that elementwise calls run
// on loops.
TEST(ReadInPlace, LoopCallsReadTheSliceOfTheReplaysIndex) {
  const int64_t n = 5000, steps = 4;
  const Tensor xs = randn(Axes{{"t", steps}, {"i", n}}, 41), w = randn(Axes{{"i", n}}, 42);
  const Tensor buf = detail::copy_of(select(xs, "t", 0)), out = zeros(Axes{{"i", n}});
  detail::KernelProgram program;
  detail::capture_into(program, [&] { detail::copy_into(out, tanh(buf) * w + buf * 0.5); });
  const int64_t bytes = n * 8, row = xs.stride("t") * 8;
  detail::KernelProgram::MovingBase at{static_cast<const char*>(xs.data_ptr()), row};
  ASSERT_EQ(program.read_in_place(buf.data_ptr(), bytes, &at), 2);  // tanh(buf), buf * 0.5
  detail::fill_zero(buf);                                           // no longer read
  for (int64_t s : {2, 0, 3}) {
    program.run("test", 0, s);
    const Tensor x = select(xs, "t", s);
    EXPECT_EQ(out.to_vector(), (tanh(x) * w + x * 0.5).to_vector()) << "step " << s;
  }
  // The base moves between replays (another scanned tensor, or the slices counted from the end).
  const Tensor other = randn(Axes{{"t", steps}, {"i", n}}, 43);
  at = {static_cast<const char*>(other.data_ptr()) + 3 * row, -row};
  program.run("test", 0, 1);
  const Tensor x = select(other, "t", 2);
  EXPECT_EQ(out.to_vector(), (tanh(x) * w + x * 0.5).to_vector());

  // Calls that cannot move, or may touch it unseen: nothing redirected, the program as captured.
  auto refused = [&](const std::string& what, auto&& body) {
    detail::KernelProgram p;
    detail::capture_into(p, body);
    detail::KernelProgram::MovingBase b{static_cast<const char*>(xs.data_ptr()), row};
    EXPECT_EQ(p.read_in_place(buf.data_ptr(), bytes, &b), -1) << what;
  };
  refused("writes it", [&] { detail::copy_into(buf, w * 2.0); });
  refused("reads it twice", [&] { detail::copy_into(out, buf * buf); });
  refused("a flat call", [&] { detail::copy_into(out, w + sum(slice(buf, "i", 0, 8))); });
  const Tensor lower = full(Axes{{"i", n}}, 0.1), diag = full(Axes{{"i", n}}, 3.0),
               upper = full(Axes{{"i", n}}, 0.2);
  refused("a call that does not name its tensors", [&] {
    detail::copy_into(out, buf + linear_recurrence(full(Axes{{"i", n}}, 0.5), w, "i"));
  });
  // A call that names its tensors, none of them the buffer, does not stop the others.
  detail::KernelProgram mixed;
  detail::capture_into(mixed,
                       [&] { detail::copy_into(out, buf + tridiagonal_solve(lower, diag, upper, w, "i")); });
  detail::KernelProgram::MovingBase b{static_cast<const char*>(xs.data_ptr()), row};
  EXPECT_EQ(mixed.read_in_place(buf.data_ptr(), bytes, &b), 1);
  mixed.run("test", 0, 3);
  EXPECT_EQ(out.to_vector(),
            (select(xs, "t", 3) + tridiagonal_solve(lower, diag, upper, w, "i")).to_vector());

  // A solve reading it as right-hand side, and one reading it twice (as both off-diagonals):
  // every operand a solve only reads moves (each its own field).
  const Tensor ten = full(Axes{{"i", n}}, 10.0);
  detail::KernelProgram solves;
  detail::capture_into(solves, [&] {
    detail::copy_into(
        out, tridiagonal_solve(lower, diag, upper, buf, "i") + tridiagonal_solve(buf, ten, buf, w, "i"));
  });
  EXPECT_EQ(solves.read_in_place(buf.data_ptr(), bytes, &b), 2);
  for (int64_t s : {1, 3}) {
    solves.run("test", 0, s);
    const Tensor xt = select(xs, "t", s);
    EXPECT_EQ(
        out.to_vector(),
        (tridiagonal_solve(lower, diag, upper, xt, "i") + tridiagonal_solve(xt, ten, xt, w, "i")).to_vector())
        << "step " << s;
  }

  // A batched matrix call that reads it names it, but not where it keeps the pointer: refused.
  const Tensor spd = tensor(std::vector<double>{4.0, 1.0, 0.0, 1.0, 3.0, 0.5, 0.0, 0.5, 2.0, 2.0, 0.1, 0.0,
                                                0.1, 2.0, 0.0, 0.0, 0.0, 2.0},
                            Axes{{"b", 2}, {"r", 3}, {"c", 3}});
  detail::KernelProgram chol;
  detail::capture_into(chol, [&] { detail::copy_into(out, w + sum(cholesky(spd, "r", "c")) * 0.0); });
  EXPECT_EQ(chol.read_in_place(spd.data_ptr(), spd.numel() * 8, &b), -1);
}

TEST(InlineCall, EveryKindShapeAndLayoutGivesTheKernelsBits) {
  // The loop planning picks per call (one row: fixed lengths 1, 2, 4, 8, 16 with b contiguous or
  // broadcast, the general loop otherwise; several rows: 2 x 2, 4 x 4 or the general loop) against
  // the kernels' element-by-element loop written out here, bit for bit: output apart from its
  // inputs, equal to a (in place), and (several rows) a reading the output transposed, which
  // reads elements the call wrote earlier.
  using K = detail::ScalarLoop::Kind;
  const K kinds[] = {K::copy, K::acc, K::neg, K::acc_neg, K::add, K::sub, K::mul, K::mul_acc};
  auto expect = [](K k, double o, double x, double y) {
    switch (k) {
      case K::copy:
        return x;
      case K::acc:
        return o + x;
      case K::neg:
        return -x;
      case K::acc_neg:
        return o - x;
      case K::add:
        return x + y;
      case K::sub:
        return x - y;
      case K::mul:
        return x * y;
      default:
        return o + x * y;
    }
  };
  enum class A { apart, strided, in_place, transposed_output };
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  int checked = 0;
  for (K k : kinds)
    for (int64_t outer : {1, 2, 3, 4})
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 16, 17})
        for (int64_t sb : {1, 0, 2})
          for (A layout : {A::apart, A::strided, A::in_place, A::transposed_output}) {
            if (layout == A::transposed_output && outer != n) continue;
            // One block of memory: o at 0 (rows of n), a and b after it.
            const int64_t span = 3 * outer * n + 1;
            std::vector<double> mem(static_cast<size_t>(3 * span));
            for (double& e : mem) e = normal(rng);
            const int64_t o0 = 0, b0 = 2 * span;
            int64_t a0 = span, sa = 1, oa = n;
            if (layout == A::strided) sa = 3, oa = 3 * n;
            if (layout == A::in_place) a0 = o0;
            if (layout == A::transposed_output) a0 = o0, sa = n, oa = 1;
            const int64_t ob = sb == 0 ? 0 : sb * n;
            std::vector<double> want = mem;
            for (int64_t r = 0; r < outer; ++r)
              for (int64_t i = 0; i < n; ++i) {
                auto at = [&](int64_t j) -> double& { return want[static_cast<size_t>(j)]; };
                at(o0 + r * n + i) =
                    expect(k, at(o0 + r * n + i), at(a0 + r * oa + i * sa), at(b0 + r * ob + i * sb));
              }
            detail::InlineCall c;
            c.o = mem.data() + o0;
            c.a = mem.data() + a0;
            c.b = mem.data() + b0;
            c.so = 1;
            c.sa = sa;
            c.sb = sb;
            c.n = n;
            c.outer = outer;
            c.oo = n;
            c.oa = oa;
            c.ob = ob;
            c.kind = k;
            c.run = detail::inline_run(c);
            ASSERT_NE(c.run, nullptr);
            c.run(c);
            ASSERT_EQ(std::memcmp(mem.data(), want.data(), mem.size() * sizeof(double)), 0)
                << "kind " << int(k) << " outer " << outer << " n " << n << " sb " << sb << " layout "
                << int(layout);
            ++checked;
          }
  EXPECT_EQ(checked, 8 * (4 * 9 * 3 * 3 + 4 * 3));
}


// Every kernel of both tables has a capture rule: each function pointer that the real table holds
// between its first entry and `transfer` (elementwise, contraction, linear algebra, recurrences,
// tridiagonal, and any kernel added there later) is another function in the capturing table. A
// kernel left out would run during capture but be missing from every scan replay, silently. The
// plan builders are read by the contraction's and the small matrices' capture rules, not replaced.
TEST(Capture, EveryKernelHasACaptureRule) {
  using detail::KernelTable;
  constexpr size_t first = offsetof(KernelTable, unary), last = offsetof(KernelTable, transfer);
  const std::pair<size_t, const char*> members[] = {
      {offsetof(KernelTable, unary), "unary"},         {offsetof(KernelTable, binary), "binary"},
      {offsetof(KernelTable, deriv_acc), "deriv_acc"}, {offsetof(KernelTable, deriv_set), "deriv_set"},
      {offsetof(KernelTable, compare), "compare"},     {offsetof(KernelTable, where), "where"},
      {offsetof(KernelTable, copy), "copy"},           {offsetof(KernelTable, acc), "acc"},
      {offsetof(KernelTable, max_acc), "max_acc"},     {offsetof(KernelTable, scale), "scale"},
      {offsetof(KernelTable, fill), "fill"},           {offsetof(KernelTable, cast_f64_f32), "cast_f64_f32"},
      {offsetof(KernelTable, cast_f32_f64), "cast_f32_f64"}, {offsetof(KernelTable, contract), "contract"},
      {offsetof(KernelTable, contract_plan), "contract_plan"}, {offsetof(KernelTable, cholesky), "cholesky"},
      {offsetof(KernelTable, cholesky_vjp), "cholesky_vjp"},   {offsetof(KernelTable, tri_solve), "tri_solve"},
      {offsetof(KernelTable, mat_plan), "mat_plan"},           {offsetof(KernelTable, solve), "solve"},
      {offsetof(KernelTable, logdet), "logdet"},               {offsetof(KernelTable, recurrence), "recurrence"},
      {offsetof(KernelTable, recurrence_vjp), "recurrence_vjp"}, {offsetof(KernelTable, tridiagonal), "tridiagonal"}};
  auto member_at = [&](size_t off) {
    const char* name = "?";
    for (const auto& [at, n] : members)
      if (at <= off) name = n;
    return std::string(name);
  };
  static_assert((last - first) % sizeof(void*) == 0);
  int checked = 0;
  for (int dev = 0; dev < 2; ++dev) {
    const auto* real = reinterpret_cast<const unsigned char*>(&detail::real_kernels(dev));
    const auto* capturing = reinterpret_cast<const unsigned char*>(&detail::capturing_kernels(dev));
    for (size_t off = first; off < last; off += sizeof(void*)) {
      const std::string member = member_at(off);
      if (member == "contract_plan" || member == "mat_plan") continue;
      void* r = nullptr;
      void* c = nullptr;
      std::memcpy(&r, real + off, sizeof r);
      std::memcpy(&c, capturing + off, sizeof c);
      if (!r) continue;
      ++checked;
      EXPECT_NE(r, c) << "device kind " << dev << ": the kernel at byte " << off << " of KernelTable (in '"
                      << member << "') has no capture rule; add one beside the kernel family (install_<family>_capture, core/ops/capture_rules.h)";
    }
  }
  EXPECT_GT(checked, 150);  // the host table alone has this many kernels
}

}  // namespace
}  // namespace tenax
