// Models that shard an axis ("sharded"): the Kalman model's likelihood and gradient under several
// ranks equal one process, each rank reads its block of a CSV input, and a bad file on one rank
// fails the load on every rank. Runs under mpirun (ctest label mpi) and as one process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kalman.h"
#include "tenax/mpi.h"
#include "tenax/tenax.h"

using namespace tenax;
using nlohmann::json;

namespace {

const Communicator& world() {
  static const Communicator c = Communicator::world();
  return c;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

// A folder all ranks share, made by rank 0; one per process count, since ctest runs the 1- to
// 4-rank tests side by side (one folder for all of them let one run's files overwrite another's).
std::filesystem::path shared_dir() {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("tenax_test_model_mpi_np" + std::to_string(world().size()));
  if (world().rank() == 0) std::filesystem::create_directories(d);
  world().barrier();
  return d;
}

Tensor block_of(const Tensor& whole, Name axis) {
  const Block b = world().block(whole.size(axis));
  return shard(contiguous(slice(whole, axis, b.offset, b.offset + b.size)), axis, world());
}

}  // namespace

TEST(ShardedModel, KalmanLikelihoodAndGradientEqualOneProcess) {
  json doc = kalman::default_model();
  doc["axes"]["series"] = 7;  // uneven over 2, 3 and 4 ranks
  doc["axes"]["time"] = 60;
  const Model truth = load_model_json(doc, ".");
  const kalman::Simulation sim = kalman::simulate(truth, 7, 60, 3);
  Tensor y = sim.y;
  // Gaps shared by every series (the model's mask), so the missing-value path is covered too.
  std::vector<double> v = contiguous(transpose(y, {"series", "time", "obs"})).to_vector();
  for (int64_t s = 0; s < 7; ++s)
    for (int64_t t = 5; t < 60; t += 9) v[static_cast<size_t>((s * 60 + t) * 2)] = std::nan("");
  y = tensor(v, Axes{{"series", 7}, {"time", 60}, {"obs", 2}});
  const Tensor observed = kalman::observed_mask(y);
  Model one = truth;
  one.set_unconstrained_vector(std::vector<double>(one.unconstrained_vector().size(), 0.1));
  const ModelGradient want = one.value_and_grad("loglik", {{"y", y}, {"observed", observed}});

  doc["sharded"] = "series";
  Model many = load_model_json(doc, ".", world());
  ASSERT_TRUE(many.sharded_axis().has_value());
  many.set_unconstrained_vector(one.unconstrained_vector());
  const ModelGradient got = many.value_and_grad("loglik", {{"y", block_of(y, "series")}, {"observed", observed}});
  EXPECT_LE(rel(got.value.item(), want.value.item()), 1e-12);
  const std::vector<double> gw = Model::flatten(want.grads), gg = Model::flatten(got.grads);
  for (size_t k = 0; k < gw.size(); ++k) EXPECT_LE(rel(gg[k], gw[k]), 1e-12) << k;
  // The per-series output stays sharded: this rank's block of the one-process values.
  const Tensor series = many.run("loglik_series", {{"y", block_of(y, "series")}, {"observed", observed}});
  ASSERT_TRUE(sharding(series).has_value());
  const Tensor whole = one.run("loglik_series", {{"y", y}, {"observed", observed}});
  const std::vector<double> a = gather(series).to_vector(), b = whole.to_vector();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(rel(a[k], b[k]), 1e-12) << k;
  // A whole y where the model wants this rank's block.
  if (world().size() > 1) {
    try {
      (void)many.run("loglik", {{"y", y}, {"observed", observed}});
      ADD_FAILURE() << "no error";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("/inputs/y: input 'y' has the axis 'series' the model shards"),
                std::string::npos)
          << e.what();
    }
  }
}

namespace {
json csv_model(const std::string& file) {
  return json::parse(R"({"format": 1, "axes": {"series": 9, "time": 3}, "sharded": "series",
    "parameters": {"w": {"axes": ["time"], "value": [1.0, 2.0, 3.0]}},
    "inputs": {"x": {"axes": ["series", "time"], "csv": ")" + file + R"("}},
    "graph": [{"name": "s", "op": "mul", "inputs": ["x", "w"]}, {"name": "total", "op": "sum", "inputs": ["s"]}],
    "outputs": {"total": "total", "s": "s"}})");
}
}  // namespace

TEST(ShardedModel, EachRankReadsItsBlockOfACsvInput) {
  const std::filesystem::path dir = shared_dir();
  if (world().rank() == 0) {
    std::ofstream f(dir / "x.csv");
    f << "a,b,c\n";
    for (int s = 0; s < 9; ++s) f << s << "," << s * 10 << "," << s * 100 << "\n";
  }
  world().barrier();
  const Model m = load_model_json(csv_model("x.csv"), dir, world());
  const Tensor x = m.input("x");
  const Block b = world().block(9);
  ASSERT_EQ(x.size("series"), b.size);
  EXPECT_EQ(x.at({{"series", 0}, {"time", 1}}), double(b.offset * 10));
  // Σ_s (s + 20 s + 300 s) over all nine series, on every rank.
  EXPECT_EQ(m.run("total").item(), 321.0 * 36);
}

TEST(ShardedModel, ReadBlockReadsThisRanksSeriesFromCsvAndBinary) {
  const std::filesystem::path dir = shared_dir();
  const Tensor whole = randn(Axes{{"series", 10}, {"time", 4}}, 5);
  if (world().rank() == 0) {
    const std::vector<double> v = whole.to_vector();
    std::ofstream(dir / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
    std::ofstream csv(dir / "w.csv");
    csv.precision(17);
    for (size_t k = 0; k < v.size(); ++k) csv << v[k] << ((k + 1) % 4 == 0 ? "\n" : ",");
    std::ofstream(dir / "short.bin", std::ios::binary).write("12345678", 8);
  }
  world().barrier();
  const Block b = world().block(10);
  const Tensor want = slice(whole, "series", b.offset, b.offset + b.size);
  for (DataFormat f : {DataFormat::csv, DataFormat::binary}) {
    const Tensor got = read_block(dir / (f == DataFormat::csv ? "w.csv" : "w.bin"), whole.axes(), world(), f);
    ASSERT_TRUE(sharding(got).has_value());
    EXPECT_EQ(sharding(got)->global, 10);
    EXPECT_EQ(got.to_vector(), want.to_vector());
  }
  try {
    (void)read_block(dir / "short.bin", whole.axes(), world(), DataFormat::binary);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short.bin holds 8 bytes; 40 float64 values need 320"), std::string::npos)
        << e.what();
  }
}

TEST(ShardedModel, ABadFileOnOneRankFailsTheLoadOnEveryRank) {
  const std::filesystem::path dir = shared_dir();
  const int bad_rank = world().size() - 1;
  const Block bad = world().block(9, bad_rank);
  if (world().rank() == 0) {
    std::ofstream f(dir / "bad.csv");
    for (int s = 0; s < 9; ++s) f << s << "," << (s == bad.offset + bad.size - 1 ? "oops" : "1") << ",2\n";
  }
  world().barrier();
  try {
    (void)load_model_json(csv_model("bad.csv"), dir, world());
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    const std::string line = std::to_string(bad.offset + bad.size);
    const std::string where = "/inputs/x/csv: " + (dir / "bad.csv").string() + " line " + line + " column 2: 'oops' is not a number";
    const std::string want = world().size() == 1 ? where
                                                 : "[mpi] rank " + std::to_string(bad_rank) + " of " +
                                                       std::to_string(world().size()) + " failed: " + where;
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(ShardedModel, FileErrors) {
  json doc = csv_model("x.csv");
  doc["sharded"] = "nope";
  EXPECT_THROW((void)load_model_json(doc, shared_dir(), world()), ModelError);
  doc = csv_model("x.csv");
  doc["parameters"]["v"] = json::parse(R"({"axes": ["series"], "value": 1.0})");
  try {
    (void)load_model_json(doc, shared_dir(), world());
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("/parameters/v/axes: a parameter cannot have the sharded axis 'series'"),
              std::string::npos)
        << e.what();
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
