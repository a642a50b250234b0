// Sharded axes: values and gradients under several ranks equal one process; what needs the whole
// axis is an Error; a failing rank makes every rank raise. Runs as one process (the communicator
// of this process alone, or MPI_COMM_WORLD of one) and under mpirun (ctest label mpi).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tenax/tenax.h"
#ifdef TENAX_TEST_MPI
#include "tenax/mpi.h"
#endif

using namespace tenax;

namespace {

Communicator comm() {
#ifdef TENAX_TEST_MPI
  static const Communicator c = Communicator::world();
  return c;
#else
  return Communicator();
#endif
}

constexpr int64_t kSeries = 11, kTime = 6;

// The whole data on every rank (one seed), and this rank's block of it, sharded.
Tensor whole_x() { return randn(Axes{{"series", kSeries}, {"time", kTime}}, 7); }
Tensor sharded(const Tensor& whole, Name axis) {
  const Block b = comm().block(whole.size(axis));
  return shard(contiguous(slice(whole, axis, b.offset, b.offset + b.size)), axis, comm());
}

// Every reduction that crosses the sharded axis, a contraction over it, a replicated-only term,
// and parameters used at every element.
Tensor loss(const std::vector<Tensor>& a) {
  const Tensor &x = a[0], &w = a[1], &b = a[2];
  const Tensor z = x * w + b;
  return sum(tanh(z)) * 0.5 + mean(z * z) + sum(max(z, {"series"})) + sum(logsumexp(z, {"series"})) +
         sum(dot(z, x, {"series"})) * 0.1 + sum(w * w);
}

double rel(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  const std::vector<double> g = got.to_vector(want.axes().names()), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_LE(rel(g[i], w[i]), tol) << i << ": " << g[i] << " vs " << w[i];
}

std::vector<Tensor> params() {
  return {tensor({0.3, -0.2, 0.5, 0.1, 0.9, -0.7}, "time"), scalar(0.25)};
}

}  // namespace

TEST(Distributed, BlocksCoverTheAxisInRankOrder) {
  const Communicator c = comm();
  int64_t next = 0;
  for (int r = 0; r < c.size(); ++r) {
    const Block b = c.block(kSeries, r);
    EXPECT_EQ(b.offset, next);
    EXPECT_GE(b.size, kSeries / c.size());
    EXPECT_LE(b.size, kSeries / c.size() + 1);
    next += b.size;
  }
  EXPECT_EQ(next, kSeries);
  EXPECT_THROW((void)c.block(c.size() - 1, 0), ShapeError);
}

TEST(Distributed, OneShardingPerAxisBlockAndCommunicator) {
  // Loading a sharded model again and again must not grow the table of shardings.
  const Tensor x = whole_x();
  const Tensor a = shard(x, "series", Communicator()), b = shard(x, "series", Communicator());
  EXPECT_EQ(a.shard_id(), b.shard_id());
  EXPECT_TRUE(Communicator() == Communicator());
  EXPECT_NE(a.shard_id(), shard(x, "time", Communicator()).shard_id());
}

TEST(Distributed, ValuesAndGradientsEqualOneProcess) {
  const Tensor x = whole_x();
  const std::vector<Tensor> p = params();
  const auto [want, want_g] = value_and_grad(loss, {x, p[0], p[1]});
  const Tensor xs = sharded(x, "series");
  const auto [got, got_g] = value_and_grad(loss, {xs, p[0], p[1]});
  EXPECT_FALSE(sharding(got).has_value());
  EXPECT_LE(rel(got.item(), want.item()), 1e-12);
  expect_close(got_g[1], want_g[1], 1e-12);
  expect_close(got_g[2], want_g[2], 1e-12);
  ASSERT_TRUE(sharding(got_g[0]).has_value());
  EXPECT_EQ(sharding(got_g[0])->global, kSeries);
  expect_close(gather(got_g[0]), want_g[0], 1e-12);
}

TEST(Distributed, ForwardModeEqualsOneProcess) {
  const Tensor x = whole_x();
  const std::vector<Tensor> p = params();
  const Tensor tx = randn(x.axes(), 11), tw = randn(p[0].axes(), 12), tb = scalar(0.3);
  const auto [value, want] = jvp(loss, {x, p[0], p[1]}, {tx, tw, tb});
  const auto [value_s, got] = jvp(loss, {sharded(x, "series"), p[0], p[1]}, {sharded(tx, "series"), tw, tb});
  EXPECT_LE(rel(value_s.item(), value.item()), 1e-12);
  EXPECT_LE(rel(got.item(), want.item()), 1e-12);
  // A sharded output's tangent is this rank's block.
  auto per_series = [](const std::vector<Tensor>& a) { return sum(exp(a[0] * a[1]), {"time"}); };
  const auto [o, t] = jvp(per_series, {sharded(x, "series"), p[0]}, {sharded(tx, "series"), tw});
  ASSERT_TRUE(sharding(t).has_value());
  const auto [o1, t1] = jvp(per_series, {x, p[0]}, {tx, tw});
  expect_close(gather(t), t1, 1e-12);
}

TEST(Distributed, TheSameBitsEveryRun) {
  const Tensor xs = sharded(whole_x(), "series");
  const std::vector<Tensor> p = params();
  const auto a = value_and_grad(loss, {xs, p[0], p[1]});
  const auto b = value_and_grad(loss, {xs, p[0], p[1]});
  const double va = a.first.item(), vb = b.first.item();
  EXPECT_EQ(std::memcmp(&va, &vb, sizeof va), 0);
  const std::vector<double> ga = a.second[1].to_vector(), gb = b.second[1].to_vector();
  EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(double)), 0);
}

// With TENAX_TEST_DIGEST=<file>, rank 0 writes the bits of the value and gradients there: ctest runs
// this twice under the same rank count and compares the files (test_distributed_two_runs).
TEST(Distributed, WritesTheBitsOfOneRunForComparison) {
  const char* path = std::getenv("TENAX_TEST_DIGEST");
  if (!path) GTEST_SKIP() << "TENAX_TEST_DIGEST is not set";
  const std::vector<Tensor> p = params();
  const auto [value, g] = value_and_grad(loss, {sharded(whole_x(), "series"), p[0], p[1]});
  std::vector<double> bits = {value.item()};
  for (const Tensor& t : {gather(g[0]), g[1], g[2]}) {
    const std::vector<double> v = t.to_vector();
    bits.insert(bits.end(), v.begin(), v.end());
  }
  if (comm().rank() != 0) return;
  std::FILE* f = std::fopen(path, "w");
  ASSERT_NE(f, nullptr);
  for (double x : bits) {
    uint64_t u = 0;
    std::memcpy(&u, &x, sizeof u);
    std::fprintf(f, "%016llx\n", static_cast<unsigned long long>(u));
  }
  std::fclose(f);
}

TEST(Distributed, ReplicatedParametersAreReducedOncePerTensor) {
  // A parameter used many times with sharded data: its adjoint is summed over ranks once.
  const Tensor x = whole_x();
  const Tensor w = scalar(0.7);
  auto f = [](const std::vector<Tensor>& a) {
    Tensor acc = sum(a[0] * a[1]);
    for (int k = 0; k < 5; ++k) acc = acc + sum(exp(a[0] * a[1] * 0.1));
    return acc;
  };
  const auto want = grad(f, {x, w});
  Tape tape;
  const Tensor xs = sharded(x, "series"), ws = tape.watch(w);
  const Tensor out = f({xs, ws});
  EXPECT_EQ(tape.stats().records, tape.stats().records);  // recorded without error
  const std::vector<Tensor> g = tape.gradient(out, {ws});
  EXPECT_LE(rel(g[0].item(), want[1].item()), 1e-12);
}

TEST(Distributed, ScanAlongAnotherAxisNmapAndCompile) {
  const Tensor x = whole_x();
  const std::vector<Tensor> p = params();
  // nmap over the sharded axis of a scan over time that closes over the parameters.
  auto f = [](const std::vector<Tensor>& a) {
    const Tensor w = a[1], b = a[2];
    const Tensor per = nmap(
        [w, b](const std::vector<Tensor>& s) {
          const auto r = scan(
              [w, b](const std::vector<Tensor>& c, const std::vector<Tensor>& xt) {
                const Tensor n = tanh(c[0] * 0.9 + xt[0] * sum(w) + b);
                return std::make_pair(std::vector<Tensor>{n}, std::vector<Tensor>{n * n});
              },
              {scalar(0.0)}, {s[0]}, "time");
          return sum(r.ys[0]);
        },
        {"series"}, {a[0]});
    return sum(per * per);
  };
  const auto [want, want_g] = value_and_grad(f, {x, p[0], p[1]});
  const Tensor xs = sharded(x, "series");
  for (int round = 0; round < 2; ++round) {  // the second call replays the kept step
    const auto [got, got_g] = value_and_grad(f, {xs, p[0], p[1]});
    EXPECT_LE(rel(got.item(), want.item()), 1e-12);
    expect_close(got_g[1], want_g[1], 1e-12);
    expect_close(got_g[2], want_g[2], 1e-12);
  }
  // A compiled function of sharded arguments: elementwise work replays; the sum over the sharded
  // axis cannot be captured, so that signature runs op by op.
  auto g = compile([](const Tensor& a, const Tensor& w) { return sum(exp(a * w)); });
  const auto [cw, cwg] = value_and_grad([&](const std::vector<Tensor>& a) { return g(a[0], a[1]); }, {x, p[0]});
  for (int round = 0; round < 2; ++round) {
    const auto [cv, cg] = value_and_grad([&](const std::vector<Tensor>& a) { return g(a[0], a[1]); }, {xs, p[0]});
    EXPECT_LE(rel(cv.item(), cw.item()), 1e-12);
    expect_close(cg[1], cwg[1], 1e-12);
  }
  auto h = compile([](const Tensor& a, const Tensor& w) { return a * w + 1.0; });
  const Tensor hx = h(xs, p[0]);
  ASSERT_TRUE(sharding(hx).has_value());
  EXPECT_LE(rel(sum(hx).item(), sum(h(x, p[0])).item()), 1e-12);
}

TEST(Distributed, AScanMixingReplicatedCarriesAndShardedSteps) {
  // The Kalman shape: a carry of replicated values (the covariance) beside per-series steps; the
  // scan's replicated outputs reach the loss both directly and through per-series terms.
  auto f = [](const std::vector<Tensor>& a) {
    const Tensor w = a[1], b = a[2];
    const auto r = scan(
        [w, b](const std::vector<Tensor>& c, const std::vector<Tensor>& xt) {
          const Tensor p = c[0] * 0.9 + b * b;                     // replicated
          const Tensor m = tanh(c[1] * 0.5 + xt[0] * sum(w)) + p;  // per series
          return std::make_pair(std::vector<Tensor>{p, m}, std::vector<Tensor>{(xt[0] - m) * (xt[0] - m) / p, log(p)});
        },
        {scalar(0.5), sum(a[0], {"time"}) * 0.0}, {a[0]}, "time");  // a per-series carry: sharded like x
    const Tensor per_series = sum(r.ys[0], {"time"}) + sum(r.ys[1]);  // the log term broadcast per series
    return sum(per_series) + sum(r.ys[1]) * 2.0 + r.carry[0] * r.carry[0] + sum(r.carry[1]);
  };
  const Tensor x = whole_x();
  const std::vector<Tensor> p = params();
  const auto [want, want_g] = value_and_grad(f, {x, p[0], p[1]});
  const auto [got, got_g] = value_and_grad(f, {sharded(x, "series"), p[0], p[1]});
  EXPECT_LE(rel(got.item(), want.item()), 1e-12);
  expect_close(got_g[1], want_g[1], 1e-12);
  expect_close(got_g[2], want_g[2], 1e-12);
  expect_close(gather(got_g[0]), want_g[0], 1e-12);
}

TEST(Distributed, MapOverTheShardedAxisRunsChunksOfThisRanksBlock) {
  auto f = [](const std::vector<Tensor>& a) {
    const std::vector<Tensor> per = map(
        [](const std::vector<Tensor>& c) { return std::vector<Tensor>{sum(tanh(c[0] * c[1]), {"time"})}; }, "series",
        {a[0], a[1]}, {.batch_size = 2});
    return sum(per[0] * per[0]);
  };
  const Tensor x = whole_x();
  const std::vector<Tensor> p = params();
  const auto [want, want_g] = value_and_grad(f, {x, p[0]});
  const auto [got, got_g] = value_and_grad(f, {sharded(x, "series"), p[0]});
  EXPECT_LE(rel(got.item(), want.item()), 1e-12);
  expect_close(got_g[1], want_g[1], 1e-12);
  expect_close(gather(got_g[0]), want_g[0], 1e-12);
}

TEST(Distributed, OpsThatNeedTheWholeAxisAreErrors) {
  const Tensor xs = sharded(whole_x(), "series");
  auto fails = [](auto&& f, const char* needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const AxisError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails([&] { (void)slice(xs, "series", 0, 1); }, "[slice] needs the whole of the sharded axis 'series'");
  fails([&] { (void)concat({xs, xs}, "series"); }, "needs the whole of the sharded axis");
  fails([&] { (void)rename(xs, Name("series"), Name("s")); }, "[rename]");
  fails([&] { (void)(xs * whole_x()); }, "has that axis whole");
  fails(
      [&] {
        (void)scan([](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
          return std::make_pair(std::vector<Tensor>{c[0] + x[0]}, std::vector<Tensor>{});
        }, {zeros(Axes{{"time", kTime}})}, {xs}, "series");
      },
      "[scan] over the axis 'series', which is sharded");
  fails(
      [&] {
        (void)associative_scan([](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
          return std::vector<Tensor>{a[0] + b[0]};
        }, {xs}, "series");
      },
      "[associative_scan] over the axis 'series', which is sharded");
  const Tensor m = sharded(randn(Axes{{"series", kSeries}, {"k", kSeries}}, 3), "series");
  fails([&] { (void)cholesky(m, "series", "k"); }, "[cholesky] needs the whole");
  // A sum over the sharded axis inside a scan body would have to communicate at every step.
  try {
    (void)scan([](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
      return std::make_pair(std::vector<Tensor>{c[0] + sum(x[0])}, std::vector<Tensor>{});
    }, {scalar(0.0)}, {xs}, "time");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce_sum] inside a scan"), std::string::npos) << e.what();
  }
}

TEST(Distributed, GatherIsExplicitAndDifferentiable) {
  const Tensor x = whole_x();
  const Tensor xs = sharded(x, "series");
  expect_close(gather(xs), x, 0.0);
  EXPECT_FALSE(sharding(gather(xs)).has_value());
  const auto want = grad([](const std::vector<Tensor>& a) { return sum(exp(a[0]) * a[0]); }, {x});
  const auto got = grad([](const std::vector<Tensor>& a) { return sum(exp(gather(a[0])) * gather(a[0])); }, {xs});
  expect_close(gather(got[0]), want[0], 1e-14);
  EXPECT_EQ(local_part(xs).size("series"), comm().block(kSeries).size);
}

TEST(Distributed, AFailingRankMakesEveryRankRaise) {
  const Communicator c = comm();
  const int bad = c.size() - 1;
  const Tensor xs = sharded(whole_x(), "series");
  try {
    (void)c.run([&] {
      if (c.rank() == bad) throw ModelError("/inputs/y: line 3: not a number");
      return sum(xs).item();  // the other ranks wait in this collective
    });
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    // One rank alone raises its own Error unchanged.
    const std::string original = "/inputs/y: line 3: not a number";
    const std::string want = c.size() == 1 ? original
                                           : "[mpi] rank " + std::to_string(bad) + " of " + std::to_string(c.size()) +
                                                 " failed: " + original;
    EXPECT_EQ(std::string(e.what()), want);
  }
  // A failure after the last collective: the closing round of run() carries it.
  try {
    c.run([&] {
      (void)sum(xs).item();
      if (c.rank() == 0) throw NumericError("[cholesky] not positive definite");
    });
    ADD_FAILURE() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find(c.size() == 1 ? "[cholesky]" : "[mpi] rank 0 of"), std::string::npos) << e.what();
  }
  // And the communicator works afterwards.
  EXPECT_LE(rel(sum(xs).item(), sum(whole_x()).item()), 1e-12);
}

#ifdef TENAX_TEST_MPI
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) delete ::testing::UnitTest::GetInstance()->listeners().Release(
      ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
#endif
