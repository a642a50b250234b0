// The fused scalar loops (core/ops/scalar_loop.h): simplify() and the machine code against the
// program as written and the handlers' arithmetic, bit for bit, on random programs, and each
// instruction's handler against its definition. (Scans that run through them: test_scan.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "tenax/core/ops/scalar_loop.h"

namespace tenax {
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

}  // namespace tenax
