// Replay planning of captured kernel programs (core/ops/capture.h): copy forwarding, contraction
// fusion, the inline calls' planned loops and the fused scalar loops' simplify(), each against the
// program as written or the kernels' own arithmetic, bit for bit. (Whole scans that replay through
// them are tested in test_scan.cpp.)
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
// previous result from registers.
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

namespace {

// One instruction of a random fused-loop program, as offsets into a test's memory (bound to
// several copies of it by bind_random).
struct RandomIns {
  detail::ScalarLoop::Kind kind;
  int arity, moving, operand[3];
  bool into_input = false;  // a moving store into the input, where other instructions load
  bool relative = false;
  int64_t stride = sizeof(double);
};

// The program on elements e, a moving input `in` and output `out`; e[0] and e[1] read after it.
detail::ScalarLoop bind_random(const std::vector<RandomIns>& ops, double* e, double* in, double* out,
                               detail::ScalarFn fn) {
  detail::ScalarLoop loop;
  for (const RandomIns& op : ops) {
    detail::ScalarLoop::Ins ins;
    ins.kind = op.kind;
    ins.arity = static_cast<int8_t>(op.arity);
    ins.fn = op.kind == detail::ScalarLoop::Kind::call ? fn : nullptr;
    for (int a = 0; a < op.arity; ++a) ins.p[a] = &e[op.operand[a]];
    if (op.moving >= 0) {
      ins.moving = static_cast<int8_t>(op.moving);
      ins.p[op.moving] = op.moving == 0 && !op.into_input ? out : in;
      ins.stride = op.stride;
      ins.relative = op.relative;
    }
    loop.push(ins);
  }
  loop.live_out(&e[0]);
  loop.live_out(&e[1]);
  return loop;
}

}  // namespace

// simplify() on random programs over six elements (two read after the loop) and a moving input
// and output (copies and arithmetic with a moving operand; some stores go into the input): after
// any number of steps, the live elements, the outputs and the input hold the same bits as with
// the program as written.
TEST(ScalarLoop, SimplifyKeepsWhatTheLoopHandsOn) {
  using K = detail::ScalarLoop::Kind;
  std::mt19937_64 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const detail::ScalarFn halve_plus_one = [](void* const* p) {
    *static_cast<double*>(p[0]) = *static_cast<const double*>(p[1]) * 0.5 + 1.0;
  };
  constexpr int kSteps = 5;
  int simplified = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    struct Memory {
      double e[6];
      double in[kSteps], out[kSteps];
    };
    Memory start{};
    for (double& v : start.e) v = static_cast<double>(pick(7)) - 3;
    for (int s = 0; s < kSteps; ++s) start.in[s] = static_cast<double>(pick(5)) - 2;
    // The program as offsets into a Memory, bound to two copies of it below.
    std::vector<RandomIns> ops;
    const int n = 3 + pick(10);
    for (int i = 0; i < n; ++i) {
      const K kinds[] = {K::copy, K::copy, K::copy,    K::acc,  K::neg,  K::acc_neg, K::add,
                         K::sub,  K::mul,  K::mul_acc, K::call, K::copy, K::acc};
      RandomIns op{kinds[pick(13)], 3, -1, {pick(6), pick(6), pick(6)}};
      if (op.kind == K::copy || op.kind == K::acc || op.kind == K::neg || op.kind == K::acc_neg ||
          op.kind == K::call)
        op.arity = 2;
      const int r = pick(8);
      if ((op.kind == K::copy || op.kind == K::acc) && r < 2) op.moving = r;  // moving in / out
      if ((op.kind == K::add || op.kind == K::sub || op.kind == K::mul) && r < 2) op.moving = pick(3);
      if (op.kind == K::mul_acc && r < 2) op.moving = 1 + pick(2);
      op.into_input = op.moving == 0 && pick(2) == 0;  // a store where other instructions load
      ops.push_back(op);
    }
    auto bind = [&](Memory& m) { return bind_random(ops, m.e, m.in, m.out, halve_plus_one); };
    Memory as_written = start, fused = start;
    detail::ScalarLoop plain = bind(as_written), simple = bind(fused);
    simple.simplify();
    simplified += simple.size() < plain.size();
    plain.run(0, kSteps, 1);
    simple.run(0, kSteps, 1);
    auto bits = [](double v) {
      uint64_t b = 0;
      std::memcpy(&b, &v, sizeof b);
      return b;
    };
    for (int e = 0; e < 2; ++e)
      ASSERT_EQ(bits(fused.e[e]), bits(as_written.e[e])) << "trial " << trial << " element " << e;
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_EQ(bits(fused.out[s]), bits(as_written.out[s])) << "trial " << trial << " step " << s;
      ASSERT_EQ(bits(fused.in[s]), bits(as_written.in[s])) << "trial " << trial << " step " << s;
    }
  }
  EXPECT_GT(simplified, 1000);  // the programs did get shorter, not only stay equal
}

// The machine code of a loop (ScalarLoop::compile_now) on random programs as above, with calls
// whose operands move too, forwards and backwards, moving operands indexed by the step or by the
// step less an offset, with strides of 0 to 3 elements: every element of memory holds the bits the lowered code's handlers leave,
// for the programs as written and simplified.
TEST(ScalarLoop, MachineCodeGivesTheHandlersBits) {
  using K = detail::ScalarLoop::Kind;
  std::mt19937_64 rng(11);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const detail::ScalarFn halve_plus_one = [](void* const* p) {
    *static_cast<double*>(p[0]) = *static_cast<const double*>(p[1]) * 0.5 + 1.0;
  };
  std::normal_distribution<double> normal;
  constexpr int kSteps = 8;
  struct Memory {
    double e[20];
    double in[6 * kSteps], out[6 * kSteps];  // (strides up to 3 elements)
  };
  int compiled = 0, calls_moving = 0, nans = 0, cells = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Memory start{};
    for (double& v : start.e) v = normal(rng);
    for (double& v : start.in) v = normal(rng);
    std::vector<RandomIns> ops;
    const int n = 1 + pick(40);
    for (int i = 0; i < n; ++i) {
      const K kinds[] = {K::copy, K::acc, K::neg, K::acc_neg, K::add, K::sub, K::mul, K::mul_acc, K::call};
      // (Twenty elements: more live values than registers in the longer programs.)
      // Strides: 0, 8 (a scaled index), 16 or 24 bytes (multiplied out).
      RandomIns op{kinds[pick(9)], 3, -1, {pick(20), pick(20), pick(20)}, false, pick(2) == 0, 8 * pick(4)};
      if (op.kind == K::copy || op.kind == K::acc || op.kind == K::neg || op.kind == K::acc_neg ||
          op.kind == K::call)
        op.arity = 2;
      if (pick(3) == 0) {
        if (op.kind == K::copy || op.kind == K::acc || op.kind == K::call) op.moving = pick(2);
        if (op.kind == K::add || op.kind == K::sub || op.kind == K::mul) op.moving = pick(3);
        if (op.kind == K::mul_acc) op.moving = 1 + pick(2);
      }
      op.into_input = op.moving == 0 && pick(2) == 0;
      calls_moving += op.kind == K::call && op.moving >= 0;
      ops.push_back(op);
    }
    auto bind = [&](Memory& m) { return bind_random(ops, m.e, m.in, m.out, halve_plus_one); };
    const int64_t offset = pick(kSteps + 1);
    const bool backwards = pick(2) == 0;
    const int64_t first = backwards ? offset + kSteps - 1 : offset;
    for (bool simplified : {false, true}) {
      Memory handled = start, machine = start;
      detail::ScalarLoop h = bind(handled), m = bind(machine);
      if (simplified) {
        h.simplify();
        m.simplify();
      }
      if (!m.compile_now()) GTEST_SKIP() << "no machine code for fused loops here (not x86-64 Linux, or refused)";
      ASSERT_FALSE(h.compiled());
      h.run(first, kSteps, backwards ? -1 : 1, offset);
      m.run(first, kSteps, backwards ? -1 : 1, offset);
      ++compiled;
      // The same bits, or NaN in both (which NaN an operation of two NaNs or inf - inf returns
      // depends on the order the compiler put a commutative operation's operands in).
      const auto* a = reinterpret_cast<const double*>(&handled);
      const auto* b = reinterpret_cast<const double*>(&machine);
      for (size_t q = 0; q < sizeof(Memory) / sizeof(double); ++q, ++cells) nans += std::isnan(a[q]) ? 1 : 0;
      for (size_t q = 0; q < sizeof(Memory) / sizeof(double); ++q)
        ASSERT_TRUE(std::memcmp(a + q, b + q, sizeof(double)) == 0 || (std::isnan(a[q]) && std::isnan(b[q])))
            << "trial " << trial << (simplified ? " simplified" : " as written") << ", element " << q << ": "
            << a[q] << " vs " << b[q];
    }
  }
  EXPECT_LT(nans, cells / 100);  // (the bits were compared, not NaNs)
  EXPECT_EQ(compiled, 8000);
  EXPECT_GT(calls_moving, 1000);
}

// The folds simplify() makes in a recurrence's step (c = a c + u_t, y_t = c c, acc += c a): the
// copy of u_t goes into both its readers, the copy of y_t into the mul that makes it, and the mul
// feeding acc's add into one mul_acc. Three instructions fewer, the same bits.
TEST(ScalarLoop, SimplifyFoldsMovingCopiesAndAccumulatedProducts) {
  using K = detail::ScalarLoop::Kind;
  constexpr int kSteps = 6;
  struct Memory {
    double e[8];  // c, a, t, u, y, acc, p, v
    double in[kSteps], out[kSteps];
  };
  auto bind = [](Memory& m) {
    detail::ScalarLoop loop;
    auto push = [&](K kind, int arity, std::initializer_list<int> operands, int moving = -1) {
      detail::ScalarLoop::Ins ins;
      ins.kind = kind;
      ins.arity = static_cast<int8_t>(arity);
      int a = 0;
      for (int e : operands) ins.p[a++] = &m.e[e];
      if (moving >= 0) {
        ins.moving = static_cast<int8_t>(moving);
        ins.p[moving] = moving == 0 ? static_cast<void*>(m.out) : static_cast<void*>(m.in);
        ins.stride = sizeof(double);
      }
      loop.push(ins);
    };
    push(K::copy, 2, {3, 3}, 1);  // u = in[s]
    push(K::mul, 3, {2, 1, 0});   // t = a * c
    push(K::add, 3, {0, 2, 3});   // c = t + u
    push(K::mul, 3, {7, 3, 1});   // v = u * a
    push(K::mul, 3, {4, 0, 0});   // y = c * c
    push(K::copy, 2, {4, 4}, 0);  // out[s] = y
    push(K::mul, 3, {6, 0, 1});   // p = c * a
    push(K::add, 3, {5, 5, 6});   // acc = acc + p
    push(K::add, 3, {1, 1, 7});   // a = a + v
    loop.live_out(&m.e[0]);
    loop.live_out(&m.e[1]);
    loop.live_out(&m.e[5]);
    return loop;
  };
  Memory start{{0.5, 0.9, 0, 0, 0, 0.25, 0, 0}, {}, {}};
  for (int s = 0; s < kSteps; ++s) start.in[s] = 0.1 * (s + 1) - 0.35;
  Memory as_written = start, folded = start;
  detail::ScalarLoop plain = bind(as_written), simple = bind(folded);
  simple.simplify();
  EXPECT_EQ(plain.size(), 9u);
  EXPECT_EQ(simple.size(), 6u);
  plain.run(0, kSteps, 1);
  simple.run(0, kSteps, 1);
  for (int e : {0, 1, 5}) EXPECT_EQ(std::memcmp(&folded.e[e], &as_written.e[e], sizeof(double)), 0) << e;
  EXPECT_EQ(std::memcmp(folded.out, as_written.out, sizeof folded.out), 0);
  EXPECT_NE(as_written.e[5], start.e[5]);

  // A store into the stacked input between the load and its reader: the reader must see the
  // value loaded before the store, so the load stays (u = in[s]; in[s] = c; c = c + u).
  Memory lw = start, ls = start;
  auto bind_store_between = [](Memory& m) {
    detail::ScalarLoop loop;
    detail::ScalarLoop::Ins load, store, add;
    load.kind = K::copy, load.arity = 2, load.moving = 1, load.stride = sizeof(double);
    load.p[0] = &m.e[3], load.p[1] = m.in;
    store.kind = K::copy, store.arity = 2, store.moving = 0, store.stride = sizeof(double);
    store.p[0] = m.in, store.p[1] = &m.e[0];
    add.kind = K::add, add.arity = 3, add.p[0] = &m.e[0], add.p[1] = &m.e[0], add.p[2] = &m.e[3];
    for (const auto& ins : {load, store, add}) loop.push(ins);
    loop.live_out(&m.e[0]);
    return loop;
  };
  detail::ScalarLoop pw = bind_store_between(lw), ps = bind_store_between(ls);
  ps.simplify();
  EXPECT_EQ(ps.size(), 3u);
  pw.run(0, kSteps, 1);
  ps.run(0, kSteps, 1);
  EXPECT_EQ(std::memcmp(&ls.e[0], &lw.e[0], sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(ls.in, lw.in, sizeof ls.in), 0);
}

// simplify_as: a loop pushed as another was but for where its stacked elements lie takes the other's
// simplified instructions with its own addresses (the bits of simplifying it afresh); a loop that
// differs anywhere else, or whose one stacked address is two in the other, is refused.
TEST(ScalarLoop, SimplifyAsReusesTheWorkForOtherStackedAddresses) {
  using K = detail::ScalarLoop::Kind;
  constexpr int kSteps = 5;
  double e[4];
  double in1[kSteps], out1[kSteps], in2[kSteps], out2[kSteps], in3[kSteps];
  auto bind = [&](double* in, double* out, double* second_in, double* fixed_a) {
    detail::ScalarLoop loop;
    auto push = [&](K kind, int arity, std::initializer_list<double*> operands, int moving, void* at) {
      detail::ScalarLoop::Ins ins;
      ins.kind = kind;
      ins.arity = static_cast<int8_t>(arity);
      int a = 0;
      for (double* o : operands) ins.p[a++] = o;
      if (moving >= 0) {
        ins.moving = static_cast<int8_t>(moving);
        ins.p[moving] = at;
        ins.stride = sizeof(double);
      }
      loop.push(ins);
    };
    push(K::copy, 2, {&e[2], &e[2]}, 1, in);                // u = in[s]
    push(K::mul, 3, {&e[3], fixed_a, &e[0]}, -1, nullptr);  // t = a * c
    push(K::add, 3, {&e[0], &e[3], &e[2]}, -1, nullptr);    // c = t + u
    push(K::mul, 3, {&e[2], &e[0], &e[0]}, -1, nullptr);    // y = c * c
    push(K::copy, 2, {&e[2], &e[2]}, 0, out);               // out[s] = y
    push(K::acc, 2, {&e[1], &e[2]}, 1, second_in);          // b += in'[s]
    loop.live_out(&e[0]);
    loop.live_out(&e[1]);
    return loop;
  };
  auto reset = [&] {
    e[0] = 0.5, e[1] = 0.25, e[2] = e[3] = 0;
    for (int s = 0; s < kSteps; ++s)
      in1[s] = in2[s] = 0.3 * s - 0.4, in3[s] = 0.125 * s, out1[s] = out2[s] = 0;
  };
  double a = 0.9, other_a = 0.9;
  detail::ScalarLoop done = bind(in1, out1, in3, &a);
  done.simplify();
  detail::ScalarLoop again = bind(in2, out2, in3, &a);
  ASSERT_TRUE(again.simplify_as(done));
  EXPECT_EQ(again.size(), done.size());
  detail::ScalarLoop fresh = bind(in2, out2, in3, &a);
  fresh.simplify();
  reset();
  fresh.run(0, kSteps, 1);
  const double c_fresh = e[0], b_fresh = e[1];
  std::vector<double> out_fresh(out2, out2 + kSteps);
  reset();
  again.run(0, kSteps, 1);
  EXPECT_EQ(std::memcmp(&e[0], &c_fresh, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&e[1], &b_fresh, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(out2, out_fresh.data(), sizeof out2), 0);
  EXPECT_EQ(out1[kSteps - 1], 0.0);  // done's stacked output untouched

  // Another fixed element: refused.
  detail::ScalarLoop elsewhere = bind(in2, out2, in3, &other_a);
  EXPECT_FALSE(elsewhere.simplify_as(done));
  // done_shared loads one stacked input through both of its moving loads: a loop loading two
  // different ones cannot take its work, one loading the same one twice can.
  detail::ScalarLoop done_shared = bind(in1, out1, in1, &a);
  done_shared.simplify();
  detail::ScalarLoop two = bind(in2, out2, in3, &a);
  EXPECT_FALSE(two.simplify_as(done_shared));
  detail::ScalarLoop same = bind(in2, out2, in2, &a);
  EXPECT_TRUE(same.simplify_as(done_shared));
}

// run() against a reference written from the instruction kinds' definitions (scalar_loop.h),
// which reads every operand from memory: random programs of every kind, with operands taken from
// the previous result (simplify()'s forwarding), moving operands absolute and relative, kernel
// calls on fixed and moving elements, forwards and backwards, bit for bit.
TEST(ScalarLoop, RunMatchesTheInstructionsDefinitions) {
  using K = detail::ScalarLoop::Kind;
  using Ins = detail::ScalarLoop::Ins;
  std::mt19937_64 rng(11);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const detail::ScalarFn twin = [](void* const* p) {  // p0 = p1 * 0.75 - p0
    double* o = static_cast<double*>(p[0]);
    *o = *static_cast<const double*>(p[1]) * 0.75 - *o;
  };
  constexpr int kSteps = 7, kOffset = 2;
  struct Memory {
    double e[6];
    double in[kSteps], out[kSteps];
  };
  auto reference = [&](const std::vector<Ins>& code, int64_t first, int64_t count, int64_t dir) {
    for (int64_t k = 0, s = first; k < count; ++k, s += dir)
      for (const Ins& c : code) {
        void* q[5];
        std::memcpy(q, c.p, sizeof q);
        if (c.moving >= 0)
          q[c.moving] = static_cast<char*>(q[c.moving]) + (c.relative ? s - kOffset : s) * c.stride;
        auto v = [&](int a) -> double& { return *static_cast<double*>(q[a]); };
        switch (c.kind) {
          case K::copy:
            v(0) = v(1);
            break;
          case K::acc:
            v(0) = v(0) + v(1);
            break;
          case K::neg:
            v(0) = -v(1);
            break;
          case K::acc_neg:
            v(0) = v(0) - v(1);
            break;
          case K::add:
            v(0) = v(1) + v(2);
            break;
          case K::sub:
            v(0) = v(1) - v(2);
            break;
          case K::mul:
            v(0) = v(1) * v(2);
            break;
          case K::mul_acc:
            v(0) = v(0) + v(1) * v(2);
            break;
          default:
            c.fn(q);
        }
      }
  };
  int with_last = 0, calls_moving = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Memory start{};
    for (double& v : start.e) v = static_cast<double>(pick(9)) - 4 + 0.125 * pick(8);
    for (int s = 0; s < kSteps; ++s) start.in[s] = static_cast<double>(pick(7)) - 3 + 0.25 * pick(4);
    for (int s = 0; s < kSteps; ++s) start.out[s] = static_cast<double>(pick(5)) - 2;
    Memory run = start, ref = start;
    std::vector<Ins> as_pushed, as_run;  // as_run: run's copy, with from_last marks
    detail::ScalarLoop loop;
    const int n = 1 + pick(12);
    for (int i = 0; i < n; ++i) {
      const K kinds[] = {K::copy, K::acc, K::neg, K::acc_neg, K::add, K::sub, K::mul, K::mul_acc, K::call};
      Ins ins;
      ins.kind = kinds[pick(9)];
      ins.arity =
          ins.kind == K::add || ins.kind == K::sub || ins.kind == K::mul || ins.kind == K::mul_acc ? 3 : 2;
      if (ins.kind == K::call) ins.fn = twin;
      const int o[3] = {pick(6), pick(6), pick(6)};
      for (int a = 0; a < ins.arity; ++a) ins.p[a] = &run.e[o[a]];
      if (pick(3) == 0 && ins.kind != K::neg && ins.kind != K::acc_neg) {  // a moving operand
        ins.moving = static_cast<int8_t>(ins.kind == K::mul_acc ? 1 + pick(2) : pick(ins.arity));
        ins.relative = pick(2) == 0;
        ins.stride = sizeof(double);
        ins.p[ins.moving] = ins.moving == 0 ? static_cast<void*>(run.out) : static_cast<void*>(run.in);
        calls_moving += ins.kind == K::call;
      }
      as_pushed.push_back(ins);
    }
    // Mark operands the previous instruction wrote (whole, at a fixed element) as from_last, as
    // link() does, by pushing the marked program.
    for (size_t i = 0; i < as_pushed.size(); ++i) {
      Ins c = as_pushed[i];
      if (i > 0 && c.kind != K::call) {
        const Ins& b = as_pushed[i - 1];
        const bool b_fixed_out = b.kind != K::call && b.moving != 0;
        const bool reads_o = c.kind == K::acc || c.kind == K::acc_neg || c.kind == K::mul_acc;
        for (int a = reads_o ? 0 : 1; a < c.arity; ++a)
          if (b_fixed_out && a != c.moving && c.p[a] == b.p[0])
            c.from_last = static_cast<uint8_t>(c.from_last | (1u << a));
        with_last += c.from_last != 0;
      }
      loop.push(c);
    }
    // The reference runs the same instructions on its own copy of the memory.
    auto rebase = [&](void* p) -> void* {
      const auto* b = reinterpret_cast<const char*>(&run);
      const auto* c = static_cast<const char*>(p);
      return reinterpret_cast<char*>(&ref) + (c - b);
    };
    std::vector<Ins> on_ref = as_pushed;
    for (Ins& c : on_ref)
      for (int a = 0; a < c.arity; ++a) c.p[a] = rebase(c.p[a]);
    const bool backwards = pick(2) == 0;
    const int64_t first = backwards ? kSteps - 1 : kOffset,
                  count = backwards ? kSteps - kOffset : kSteps - kOffset;
    const int64_t dir = backwards ? -1 : 1;
    loop.run(first, count, dir, kOffset);
    reference(on_ref, first, count, dir);
    auto bits = [](double v) {
      uint64_t b = 0;
      std::memcpy(&b, &v, sizeof b);
      return b;
    };
    for (int e = 0; e < 6; ++e)
      ASSERT_EQ(bits(run.e[e]), bits(ref.e[e])) << "trial " << trial << " element " << e;
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_EQ(bits(run.in[s]), bits(ref.in[s])) << "trial " << trial << " input " << s;
      ASSERT_EQ(bits(run.out[s]), bits(ref.out[s])) << "trial " << trial << " output " << s;
    }
  }
  EXPECT_GT(with_last, 1000);  // the previous result's forms did run
  EXPECT_GT(calls_moving, 100);
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
