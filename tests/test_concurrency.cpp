// Concurrency: many tasks, each recording and differentiating its own tape (a recurrence, a scan,
// a Cholesky factor and a log-determinant), give bitwise the serial results; tasks evaluating one
// model at once (sharing its compiled scans) give the serial values; a tape or a tracked
// tensor used from a thread that does not own the tape is an AutodiffError, not a race.
// scripts/test.sh also runs this file under ThreadSanitizer. Debian's oneTBB is not built for
// TSan (its internal synchronisation is invisible to it and reported as races), so under TSan the
// tasks run on plain std::threads; everywhere else on oneTBB.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <tbb/parallel_for.h>

#include <tenax/tenax.h>
#include <nlohmann/json.hpp>

#include "expect_message.h"

#if defined(__SANITIZE_THREAD__)
#define TENAX_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TENAX_TEST_UNDER_TSAN 1
#endif
#endif

namespace tenax {
namespace {

// Runs fn(0 .. n-1) concurrently; the first exception is rethrown here.
template <class Fn>
void run_tasks(int n, const Fn& fn) {
#ifdef TENAX_TEST_UNDER_TSAN
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (int w = 0; w < 4; ++w)
    pool.emplace_back([&] {
      for (int k = next++; k < n; k = next++) {
        try {
          fn(k);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
    });
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
#else
  tbb::parallel_for(0, n, fn);
#endif
}

// One task's work: value and gradient of a loss through a linear recurrence, a scan, a Cholesky
// factor and a log-determinant, w.r.t. the decay and the matrix.
std::vector<double> work(int k) {
  const Tensor lam = tensor({0.5 + 0.0003 * k, 0.9 - 0.0002 * k}, "i");
  const Tensor a = tensor({{1.0 + 0.001 * k, 0.2}, {0.2, 1.5}}, "r", "c");
  const Tensor u = uniform(Axes{{"t", 24}, {"i", 2}}, static_cast<uint64_t>(k) + 1, -1, 1);
  auto f = [&u](const std::vector<Tensor>& p) {
    const Tensor x = linear_recurrence(p[0], u, "t");
    ScanResult r = scan(
        [&p](const std::vector<Tensor>& c, const std::vector<Tensor>& xt) {
          Tensor h = tanh(p[0] * c[0] + xt[0]);
          return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{sum(h * h)});
        },
        {zeros(Axes{{"i", 2}})}, {u}, "t");
    return sum(x * x) + sum(r.ys[0]) + logdet(p[1], "r", "c") + sum(cholesky(p[1], "r", "c"));
  };
  auto [v, g] = value_and_grad(f, {lam, a});
  std::vector<double> out{v.item()};
  for (const Tensor& t : g)
    for (double d : t.to_vector()) out.push_back(d);
  return out;
}

TEST(Concurrency, ThousandTasksWithOwnTapesMatchTheSerialRunBitwise) {
  const int tasks = 1000;
  std::vector<std::vector<double>> serial(tasks), parallel(tasks);
  for (int k = 0; k < tasks; ++k) serial[size_t(k)] = work(k);
  run_tasks(tasks, [&](int k) { parallel[size_t(k)] = work(k); });
  for (int k = 0; k < tasks; ++k) {
    ASSERT_EQ(serial[size_t(k)].size(), 7u);
    EXPECT_EQ(serial[size_t(k)], parallel[size_t(k)]) << "task " << k;  // bitwise
  }
}

TEST(Concurrency, OneModelEvaluatedFromManyTasksAtOnce) {
  // A model's scans keep their compiled step between evaluations (autodiff/scan_cache.h): tasks
  // evaluating one model at once each take it, or compile their own while another holds it, and
  // every value and gradient is the one a serial evaluation gives.
  nlohmann::json doc =
      nlohmann::json::parse(std::ifstream(std::string(TENAX_SOURCE_DIR) + "/examples/kalman/model.json"));
  doc["axes"]["series"] = 2;
  doc["axes"]["time"] = 30;
  const Model m = load_model_json(doc, std::string(TENAX_SOURCE_DIR) + "/examples/kalman");
  const int tasks = 64;
  auto eval = [&](int k) {
    const TensorMap in = {{"y", randn(Axes{{"series", 2}, {"time", 30}, {"obs", 2}}, uint64_t(k) + 1)}};
    const ModelGradient g = m.value_and_grad("loglik", in);
    std::vector<double> out{g.value.item()};
    for (double d : Model::flatten(g.grads)) out.push_back(d);
    return out;
  };
  std::vector<std::vector<double>> serial(tasks), parallel(tasks);
  for (int k = 0; k < tasks; ++k) serial[size_t(k)] = eval(k);
  run_tasks(tasks, [&](int k) { parallel[size_t(k)] = eval(k); });
  for (int k = 0; k < tasks; ++k) {
    ASSERT_EQ(parallel[size_t(k)].size(), serial[size_t(k)].size());
    for (size_t q = 0; q < serial[size_t(k)].size(); ++q)
      EXPECT_NEAR(parallel[size_t(k)][q], serial[size_t(k)][q], 1e-10 * (1 + std::abs(serial[size_t(k)][q])))
          << "task " << k << ", entry " << q;
  }
}

TEST(Concurrency, OneCompiledFunctionCalledFromManyTasksAtOnce) {
  // Each call takes a set of buffers no other call holds (or captures one): values and gradients
  // are the serial run's, bitwise, under tapes of the tasks' own.
  const CompiledFunction f = compile([](const std::vector<Tensor>& p) {
    const Tensor h = tanh(dot(p[0], rename(p[1], "i", "j"), {"j"}));
    return std::vector<Tensor>{sum(h * h) + logdet(dot(p[0], rename(p[0], "i", "k"), {"j"}) + 1.0, "i", "k")};
  });
  auto eval = [&](int k) {
    const Tensor w = randn(Axes{{"i", 3}, {"j", 3}}, uint64_t(k) + 1), x = randn(Axes{{"i", 3}}, uint64_t(k) + 7);
    auto [v, g] = value_and_grad([&](const std::vector<Tensor>& p) { return f(p)[0]; }, {w, x});
    std::vector<double> out{v.item()};
    for (const Tensor& t : g)
      for (double d : t.to_vector()) out.push_back(d);
    return out;
  };
  const int tasks = 200;
  std::vector<std::vector<double>> serial(tasks), parallel(tasks);
  for (int k = 0; k < tasks; ++k) serial[size_t(k)] = eval(k);
  run_tasks(tasks, [&](int k) { parallel[size_t(k)] = eval(k); });
  for (int k = 0; k < tasks; ++k) EXPECT_EQ(serial[size_t(k)], parallel[size_t(k)]) << "task " << k;
  EXPECT_EQ(f.stats().traces, 1);
}

// Runs fn on a new thread and returns what it threw (empty when nothing).
template <class Fn>
std::string error_on_other_thread(const Fn& fn) {
  std::string what;
  std::thread t([&] {
    try {
      fn();
    } catch (const AutodiffError& e) {
      what = e.what();
    } catch (const std::exception& e) {
      what = std::string("unexpected exception: ") + e.what();
    }
  });
  t.join();
  return what;
}

TEST(Concurrency, ATapeOrATrackedTensorUsedFromAnotherThreadIsAnError) {
  Tape tape;
  const Tensor x = tape.watch(tensor({1.0, 2.0}, "i"));
  const Tensor y = sum(x * x);
  EXPECT_MESSAGE(error_on_other_thread([&] { (void)tape.gradient(y, {x}); }),
                 "[tape] gradient called from a thread that does not own the tape");
  EXPECT_MESSAGE(error_on_other_thread([&] { (void)tape.watch(tensor({1.0}, "j")); }),
                 "[tape] watch called from a thread that does not own the tape");
  EXPECT_MESSAGE(error_on_other_thread([&] { (void)(x * 2.0); }),
                 "[mul] input 0 is tracked by a tape that is recording on another thread");
  // The owner is unaffected.
  EXPECT_EQ(tape.gradient(y, {x})[0].to_vector(), (std::vector<double>{2.0, 4.0}));
}

TEST(Concurrency, TensorsOfAFinishedTapeArePlainValuesOnAnyThread) {
  Tensor x;
  {
    Tape tape;
    x = tape.watch(tensor({1.0, 2.0}, "i")) * 3.0;
  }
  std::vector<double> seen;
  EXPECT_EQ(error_on_other_thread([&] { seen = (x + 1.0).to_vector(); }), "");
  EXPECT_EQ(seen, (std::vector<double>{4.0, 7.0}));
}

TEST(Concurrency, TapesEndingOutOfOrderInManyTasksAtOnce) {
  // Each task keeps three tapes alive and ends them oldest first, then the middle one first; the
  // tape still alive records and differentiates as if alone (thread-local state, no sharing).
  constexpr int tasks = 64;
  std::vector<double> got(tasks * 2);
  run_tasks(tasks, [&](int k) {
    const Tensor x = scalar(double(k));
    auto a = std::make_unique<Tape>();
    auto b = std::make_unique<Tape>();
    const Tensor wb = b->watch(x);
    a.reset();
    got[size_t(2 * k)] = b->gradient(wb * wb, {wb})[0].item();
    auto c = std::make_unique<Tape>();
    auto d = std::make_unique<Tape>();
    c.reset();
    const Tensor wd = d->watch(x);
    got[size_t(2 * k + 1)] = d->gradient(wd * 3.0, {wd})[0].item();
    d.reset();
    b.reset();
  });
  for (int k = 0; k < tasks; ++k) {
    EXPECT_EQ(got[size_t(2 * k)], 2.0 * k);
    EXPECT_EQ(got[size_t(2 * k + 1)], 3.0);
  }
}

#ifndef TENAX_TEST_UNDER_TSAN  // (map's chunks run on oneTBB, which TSan's run leaves out)
// The distinct threads that ran the chunks of a parallel map (each chunk takes 20 ms, so that a
// free worker would pick one up).
size_t threads_running_chunks() {
  std::mutex m;
  std::set<std::thread::id> seen;
  MultiFunction body = [&](const std::vector<Tensor>& a) {
    {
      const std::lock_guard<std::mutex> lock(m);
      seen.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::vector<Tensor>{a[0] * 2.0};
  };
  MapOptions o;
  o.batch_size = 1;
  o.parallel_chunks = 8;
  (void)map(body, "i", {ones(Axes{{"i", 8}})}, o);
  return seen.size();
}
#endif

TEST(Threads, TheLimitIsTheUsersToSet) {
#ifndef TENAX_TEST_UNDER_TSAN
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  EXPECT_LE(threads_running_chunks(), 2u);  // 2 where a worker is free (every run here so far)
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_EQ(threads_running_chunks(), 1u);  // the caller alone
  set_num_threads(0);  // back to the default (the environment's, else every core)
  EXPECT_GE(num_threads(), 1);
#endif
  try {
    set_num_threads(-1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_MESSAGE(e.what(), "[threads] set_num_threads needs n >= 0 (0: the default), got -1");
  }
}

// Run by ctest with TENAX_NUM_THREADS=1 (test_threads_env) and =abc (test_threads_env_invalid).
TEST(Threads, TheEnvironmentVariableSetsTheDefault) {
  const char* v = std::getenv("TENAX_NUM_THREADS");
  if (!v) GTEST_SKIP() << "TENAX_NUM_THREADS is not set (ctest's test_threads_env sets it)";
  if (std::string(v) == "abc") {  // a bad value is an Error at every op, not a silent default
    for (int k = 0; k < 2; ++k) {
      try {
        (void)(ones(Axes{{"i", 4}}) * 2.0);
        FAIL() << "no error";
      } catch (const Error& e) {
        EXPECT_MESSAGE(e.what(), "[environment] TENAX_NUM_THREADS='abc': expected an integer from 1 to 1048576");
      }
    }
    return;
  }
  (void)(ones(Axes{{"i", 4}}) * 2.0);  // the first op applies it
  EXPECT_EQ(num_threads(), std::atoi(v));
}

}  // namespace
}  // namespace tenax
