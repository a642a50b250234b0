// Scale-out over MPI (issue 44): the Kalman model's value_and_grad with its series sharded across
// the ranks of MPI_COMM_WORLD, one thread per rank, and the all-reduce under it. Run under mpirun
// (bench/scaling.sh: 1, 2 and 4 ranks); rank 0 reports. Every benchmark runs a fixed number of
// iterations so that the ranks stay in step.
//   BM_KalmanStrong/S/T: S series in all, split across the ranks (state 2, two observations)
//   BM_KalmanWeak/S/T:   S series per rank
//   BM_AllReduce/K:      the deterministic sum over ranks of K doubles (Tenax's collective)
// Counters per iteration: comm_s (wall time inside Tenax collectives, waiting included),
// compute_s (the rest), ranks, and ns_per_series_step = compute per series and step on one rank.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cstdio>
#include <vector>

#include <tenax/mpi.h>
#include <tenax/tenax.h>

#include "kalman.h"
#include "kalman_bench_model.h"

namespace {

using namespace tenax;

const Communicator& world() {
  static const Communicator c = Communicator::world();
  return c;
}

// The model sharded over the world, this rank's block of simulated observations.
struct Problem {
  Model model;
  TensorMap inputs;
  int64_t local_series;
};

Problem problem(int64_t series, int64_t steps) {
  nlohmann::json doc = bench::kalman_model(2, series, steps).to_json(".");
  doc["sharded"] = "series";
  Model model = load_model_json(doc, ".", world());
  // Each rank simulates its own block (a seed per rank): no rank builds the whole data.
  const Block b = world().block(series);
  nlohmann::json local = doc;
  local.erase("sharded");
  local["axes"]["series"] = b.size;
  const kalman::Simulation sim = kalman::simulate(load_model_json(local, "."), b.size, steps, 17 + world().rank());
  TensorMap inputs = {{"y", shard(sim.y, "series", world())}};
  return {std::move(model), std::move(inputs), b.size};
}

void run_kalman(benchmark::State& state, int64_t series) {
  const int64_t steps = state.range(1);
  Problem p = problem(series, steps);
  (void)p.model.value_and_grad("loglik", p.inputs);  // traced and compiled; excluded
  world().reset_stats();
  double wall = 0.0;
  for (auto _ : state) {
    const double t0 = MPI_Wtime();
    benchmark::DoNotOptimize(p.model.value_and_grad("loglik", p.inputs).value);
    wall += MPI_Wtime() - t0;
  }
  const double n = static_cast<double>(state.iterations());
  const double comm = world().stats().seconds / n, compute = wall / n - comm;
  state.counters["ranks"] = world().size();
  state.counters["comm_s"] = comm;
  state.counters["compute_s"] = compute;
  state.counters["collectives"] = static_cast<double>(world().stats().collectives) / n;
  state.counters["ns_per_series_step"] = 1e9 * compute / static_cast<double>(p.local_series * steps);
}

void BM_KalmanStrong(benchmark::State& state) { run_kalman(state, state.range(0)); }
void BM_KalmanWeak(benchmark::State& state) { run_kalman(state, state.range(0) * world().size()); }

void BM_AllReduce(benchmark::State& state) {
  const int64_t k = state.range(0);
  const Tensor partial = full(Axes{{"k", k}}, 1.0 + world().rank());
  const Tensor block = shard(full(Axes{{"s", 1}, {"k", k}}, 1.0), "s", world());
  world().reset_stats();
  for (auto _ : state) benchmark::DoNotOptimize(sum(block * partial, {"s"}));
  state.counters["ranks"] = world().size();
  state.counters["bytes"] = static_cast<double>(k * 8);
  state.counters["comm_us"] = 1e6 * world().stats().seconds / static_cast<double>(state.iterations());
}

BENCHMARK(BM_KalmanStrong)->Args({4096, 1000})->Args({256, 200})->Args({256, 400})->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KalmanWeak)->Args({4096, 1000})->Args({256, 200})->Args({256, 400})->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
// The same at 3 and 9 iterations: instructions per series-step from the difference (cachegrind;
// bench/scaling.sh --count).
BENCHMARK(BM_KalmanWeak)->Args({256, 200})->Iterations(9)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllReduce)->Arg(1)->Arg(16)->Arg(1024)->Arg(65536)->Arg(1 << 20)->Iterations(200)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Rank 0 reports; the others run the same iterations silently.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  set_num_threads(1);  // one core per rank
  benchmark::Initialize(&argc, argv);
  if (world().rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
