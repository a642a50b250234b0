// Implicit vertical diffusion in many independent water columns (examples/diffusion/model.json):
// each time step is one tridiagonal solve per column, the run is a scan over time. From profiles
// observed with noise, recover the depth-dependent diffusivity by L-BFGS on the misfit, gradients
// by reverse mode through the scan and the solves (implicit-function adjoint).
//
//   tenax_diffusion_fit                         simulate from a known profile, fit, print both
//   tenax_diffusion_fit --noise 0.002 --seed 3
//   tenax_diffusion_fit --columns 4096          many columns: one batched solve per step
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "model_fit.h"
#include "tenax/tenax.h"

namespace {

using namespace tenax;

// The model file, widened to `columns` columns when asked: initial profiles are generated (a
// Gaussian bump at a depth and width that vary by column) instead of read from initial.csv.
Model load(const std::string& path, int64_t columns) {
  if (columns <= 0) return load_model(path);
  std::ifstream in(path);
  if (!in) throw ModelError("/: cannot open the model file '" + path + "'");
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded()) throw ModelError("/: the model is not valid JSON");
  const int64_t depth = doc.at("axes").at("depth").get<int64_t>();
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t c = 0; c < columns; ++c) {
    const double centre = 4.0 + 22.0 * double(c % 97) / 96.0, width = 2.5 + double(c % 4);
    nlohmann::json row = nlohmann::json::array();
    for (int64_t z = 0; z < depth; ++z) row.push_back(std::exp(-std::pow((double(z) - centre) / width, 2)));
    rows.push_back(row);
  }
  doc["axes"]["column"] = columns;
  doc["inputs"]["u0"] = {{"axes", {"column", "depth"}}, {"value", rows}};
  return load_model_json(doc, std::filesystem::path(path).parent_path());
}

// The diffusivity the observations are simulated from: a strongly mixed surface layer over a
// quieter interior.
std::vector<double> true_kappa(int64_t depth) {
  std::vector<double> k(static_cast<size_t>(depth));
  for (int64_t z = 0; z < depth; ++z)
    k[size_t(z)] = 0.2 + 1.5 * std::exp(-std::pow((double(z) - 8.0) / 5.0, 2));
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tenax diffusion example: recover a depth-dependent diffusivity from observed profiles"};
  std::string model_path = TENAX_DIFFUSION_MODEL;
  double noise = 0.001;
  uint64_t seed = 1;
  int max_iter = 200;
  int64_t columns = 0;
  app.add_option("--model", model_path, "model JSON (default: examples/diffusion/model.json)");
  app.add_option("--columns", columns, "widen the model to this many columns (generated initial profiles)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
  app.add_option("--noise", noise, "standard deviation of the observation noise")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", seed, "seed of the observation noise");
  app.add_option("--max-iter", max_iter, "L-BFGS iteration limit")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  try {
    Model model = load(model_path, columns);
    const ModelAxes& ax = model.axes();
    const int64_t T = ax.size_of("time"), C = ax.size_of("column"), Z = ax.size_of("depth");
    std::printf(
        "model %s: %lld columns x %lld cells, %lld implicit steps (one tridiagonal solve per column and "
        "step)\n",
        model_path.c_str(), (long long)C, (long long)Z, (long long)T);

    // Observations: the model run from the true diffusivity, plus Gaussian noise.
    const Axes obs_axes{{"time", T}, {"column", C}, {"depth", Z}};
    const std::vector<double> kappa = true_kappa(Z);
    model.set_parameter("kappa", tensor(kappa, Axes{{"depth", Z}}));
    std::vector<double> obs =
        model.run("profiles", {{"obs", zeros(obs_axes)}}).to_vector({"time", "column", "depth"});
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> z;
    for (double& v : obs) v += noise * z(rng);
    const TensorMap inputs{{"obs", tensor(obs, obs_axes)}};
    std::printf("simulated %zu observations, noise %.3g (seed %llu)\n", obs.size(), noise,
                (unsigned long long)seed);

    // Fit from a flat start; the objective is the misfit per observation.
    model.set_parameter("kappa", full(Axes{{"depth", Z}}, 0.5));
    std::printf("\n%5s  %14s  %12s  %9s\n", "iter", "misfit/obs", "|grad|", "time (s)");
    const double scale = 1.0 / double(obs.size());
    const example::FitResult fit =
        example::minimize(model, "misfit", inputs, scale, {max_iter, 1e-10}, [](const example::Progress& p) {
          std::printf("%5d  %14.6e  %12.3e  %9.3f\n", p.iteration, p.objective, p.grad_norm, p.seconds);
        });
    std::printf(
        "\nL-BFGS: %d iterations, %d evaluations of value and gradient, %.2f s; misfit/obs %.3e "
        "(noise variance %.3e)\n%s: %s\n\n",
        fit.iterations, fit.evaluations, fit.seconds, fit.objective, noise * noise,
        fit.converged ? "converged" : "NOT converged", fit.reason.c_str());

    // The recovered profile. The bottom face is closed (no flux): its diffusivity never enters.
    const std::vector<double> got = model.parameter("kappa").to_vector();
    std::printf("%6s  %10s  %10s  %9s\n", "face", "true", "fitted", "error");
    double worst = 0.0;
    for (int64_t f = 0; f + 1 < Z; ++f) {
      const double err = got[size_t(f)] - kappa[size_t(f)];
      worst = std::max(worst, std::abs(err) / kappa[size_t(f)]);
      std::printf("%6lld  %10.4f  %10.4f  %+9.4f\n", (long long)f, kappa[size_t(f)], got[size_t(f)], err);
    }
    std::printf("\nlargest relative error of the recovered diffusivity: %.2f%%\n", 100.0 * worst);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
