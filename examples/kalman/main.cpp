// The flagship example: fit a linear-Gaussian state-space model's parameters by maximising the
// Kalman-filter log-likelihood with L-BFGS, gradients by reverse mode through the scan.
//
//   tenax_kalman_fit                       simulate from the embedded model, fit, report, save, plot
//   tenax_kalman_fit --series 16 --steps 2000
//   tenax_kalman_fit --csv observations.csv   (one series: rows are time steps, columns obs)
//   mpirun -np 4 tenax_kalman_fit --series 4096   (series split across the ranks; rank 0 reports)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "kalman.h"
#include "report.h"
#ifdef TENAX_KALMAN_MPI
#include "tenax/mpi.h"
#endif

namespace {

using namespace tenax;
using nlohmann::json;

// The model document: the embedded one, or a file read as text (syntax errors keep their line and
// column) that must name what this tool reads and writes.
json model_document(const std::string& path) {
  if (path.empty()) return kalman::default_model();
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) throw Error("cannot read the model file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = read_model_document(text.str());  // duplicate keys, nesting, syntax: the loader's checks
  } catch (const ModelError& e) {
    throw ModelError(std::string(e.what()) + " (in '" + path + "')");
  }
  if (!doc.is_object() || !doc.contains("axes") || !doc["axes"].is_object())
    throw ModelError("/axes: '" + path + "' declares no axes; this tool needs a model with axes series, time, "
                     "obs and state (see examples/kalman/model.json)");
  for (const char* axis : {"series", "time", "obs", "state"})
    if (!doc["axes"].contains(axis))
      throw ModelError("/axes: '" + path + "' has no axis '" + axis +
                       "'; this tool reads observations y (series, time, obs) and a state axis 'state'");
  if (!doc["axes"]["obs"].is_number_integer() || doc["axes"]["obs"].get<int64_t>() < 1)
    throw ModelError("/axes/obs: expected a positive integer size");
  for (const char* output : {"loglik", "filtered"})
    if (!doc.contains("outputs") || !doc["outputs"].is_object() || !doc["outputs"].contains(output))
      throw ModelError("/outputs: '" + path + "' has no output '" + output + "'; this tool maximises 'loglik' and "
                       "plots 'filtered'");
  return doc;
}

// Fails now, not after the fit, when `path` cannot be written.
void check_writable(const std::string& path) {
  const std::filesystem::path probe = std::filesystem::path(path).concat(".check");
  {
    std::ofstream out(probe);
    if (!out) throw Error("cannot write '" + path + "' (--out): check the folder exists and is writable");
  }
  std::error_code ec;
  std::filesystem::remove(probe, ec);
}

// "cpu", "cuda" or "cuda:N".
Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos &&
      s.size() < 10)
    return Device::cuda(std::stoi(s.substr(5)));
  throw Error("--device '" + s + "': expected cpu, cuda or cuda:N");
}

struct Options {
  std::string model_path, csv_path, out_path = "kalman_fitted.json", plot_path = "kalman.png",
                                    device_name = "cpu", start_from;
  std::string states_path = "kalman_states.csv", forecast_path = "kalman_forecast.csv";
  int64_t series = 16, steps = 1000, seed = 42, horizon = 10;
  int max_iter = 200;
  bool no_plot = false;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model_path, "model JSON (default: the embedded examples/kalman/model.json)");
  app.add_option("--series", o.series, "independent series to simulate (nmap over 'series')")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", o.steps, "time steps per series")->check(CLI::Range(2, 1 << 24));
  app.add_option("--seed", o.seed, "seed of the simulation")->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--csv", o.csv_path, "fit these observations instead (rows: time, columns: obs)");
  app.add_option("--max-iter", o.max_iter, "L-BFGS iteration limit")->check(CLI::Range(1, 100000));
  app.add_option("--out", o.out_path, "where to write the fitted model");
  app.add_option("--plot", o.plot_path, "PNG of observations, states and forecasts (needs gnuplot)");
  app.add_flag("--no-plot", o.no_plot, "do not plot");
  app.add_option("--horizon", o.horizon, "steps ahead to forecast (the model's axis 'horizon')")
      ->check(CLI::Range(1, 100000));
  app.add_option("--states", o.states_path,
                 "CSV of the observations, filtered and smoothed states and the smoothed standard deviations");
  app.add_option("--forecasts", o.forecast_path, "CSV of the forecasts' means and standard deviations");
  app.add_option("--device", o.device_name,
                 "where the fit runs: cpu, cuda or cuda:N (data and constants are copied there once)");
  app.add_option("--start", o.start_from,
                 "where the fit starts: 'model' (the model file's values) or 'zero' (unconstrained 0: F = 0, "
                 "Q = I, r = 0.69); default: model with --csv, zero when simulating (the model's values are "
                 "the truth then)")
      ->check(CLI::IsMember({"model", "zero"}));
}

// The observations (read or simulated), the true states when simulated, and the model with the
// data's sizes (its parameters the truth when simulating).
struct Problem {
  Model truth;
  Tensor y, x_true;  // every series (on every rank)
  TensorMap inputs;  // y (this rank's block of series, sharded), and observed when the model marks missing values
};

// This rank's block of the series, sharded across `comm` (the whole of them on one rank).
Tensor series_block(const Tensor& y, const Model& model) {
  if (!model.sharded_axis()) return y;
  const Block b = model.communicator().block(y.size("series"));
  return shard(contiguous(slice(y, "series", b.offset, b.offset + b.size)), "series", model.communicator());
}

Problem load_problem(Options& o, json doc, const Communicator& comm) {
  const bool has_observed = doc.contains("inputs") && doc["inputs"].is_object() && doc["inputs"].contains("observed");
  if (doc["axes"].contains("horizon")) doc["axes"]["horizon"] = o.horizon;
  const int64_t p = doc["axes"]["obs"].get<int64_t>();
  Tensor y, x_true;
  if (!o.csv_path.empty()) {
    y = kalman::read_csv_observations(o.csv_path, p, has_observed);
    o.series = 1;
    o.steps = y.size("time");
  }
  doc["axes"]["series"] = o.series;
  doc["axes"]["time"] = o.steps;
  if (comm.size() > 1) doc["sharded"] = "series";
  const std::filesystem::path base =
      o.model_path.empty() ? std::filesystem::current_path() : std::filesystem::path(o.model_path).parent_path();
  Model truth = load_model_json(doc, base, comm);
  if (o.csv_path.empty()) {
    const kalman::Simulation sim = kalman::simulate(truth, o.series, o.steps, uint64_t(o.seed));
    y = sim.y;
    x_true = sim.x;
    std::printf("simulated %lld series x %lld steps from the model's parameters (seed %llu)\n", (long long)o.series,
                (long long)o.steps, (unsigned long long)o.seed);
  } else {
    const std::vector<double> v = y.to_vector();
    const auto gaps = std::count_if(v.begin(), v.end(), [](double x) { return std::isnan(x); });
    std::printf("read %lld observations of dimension %lld from %s (%lld values missing)\n", (long long)o.steps,
                (long long)p, o.csv_path.c_str(), (long long)gaps);
  }
  // Simulated on every rank alike (one seed); each rank fits its block of the series.
  TensorMap inputs = {{"y", series_block(y, truth)}};
  if (has_observed) inputs["observed"] = kalman::observed_mask(y);
  return {std::move(truth), y, x_true, std::move(inputs)};
}

// Runs L-BFGS on `device` with one progress line per iteration and says how it ended.
kalman::FitResult run_fit(Model& model, const TensorMap& inputs, const Device& device, const Options& o) {
  TensorMap fit_inputs;
  for (const auto& [name, t] : inputs) fit_inputs[name] = to(t, device);
  if (!(device == Device::cpu())) std::printf("fitting on %s\n", device.str().c_str());
  std::printf("trainable: ");
  for (const std::string& n : model.trainable()) std::printf("%s ", n.c_str());
  std::printf("(%zu unconstrained coordinates, starting from %s)\n\n", model.unconstrained_vector().size(),
              o.start_from == "zero" ? "unconstrained 0" : "the model's values");
  std::printf("%5s  %16s  %12s  %9s\n", "iter", "log-likelihood", "|grad|/obs", "time (s)");
  const kalman::FitResult fit = kalman::fit(model, fit_inputs, {o.max_iter, 1e-6}, [](const kalman::Progress& pr) {
    std::printf("%5d  %16.6f  %12.3e  %9.3f\n", pr.iteration, pr.loglik, pr.grad_norm, pr.seconds);
    std::fflush(stdout);
  });
  std::printf("\nL-BFGS: %d iterations, %d evaluations of value and gradient, %.2f s\n", fit.iterations,
              fit.evaluations, fit.seconds);
  if (fit.failed_points > 0)
    std::printf("%d trial points failed (a covariance not positive definite, a variance that underflows); the "
                "line search backed off\n",
                fit.failed_points);
  std::printf("%s: %s\n", fit.converged ? "converged" : "NOT converged", fit.reason.c_str());
  return fit;
}

// Standard errors from the observed information, only at an optimum and only when the information
// is well conditioned (a table of false confidence is worse than none).
kalman::Uncertainty uncertainty_at(Model& model, const TensorMap& inputs, const kalman::FitResult& fit) {
  kalman::Uncertainty unc;
  if (!fit.converged) return unc;
  TensorMap on_device;
  for (const auto& [name, t] : inputs) on_device[name] = to(t, model.device());
  unc = kalman::uncertainty(model, on_device);
  if (unc.near_singular)
    std::printf("\nwarning: the observed information is near-singular (condition %.2e): the data do not "
                "identify every parameter, so no standard errors are given\n",
                unc.condition);
  return unc;
}

// The fitted model saved and reloaded (the same log-likelihood, bit for bit), the states and
// forecasts as CSV and the picture, where the model has the outputs they need.
// Under MPI every rank computes (the runs are collectives) and rank 0 alone writes.
void write_results(Model& model, const Problem& pr, const Options& o) {
  const Communicator& comm = model.communicator();
  if (comm.rank() == 0) model.save(o.out_path);
  comm.barrier();  // the file is there before any rank reads it
  model.set_device(Device::cpu());  // the checks and the plot below run on the host
  const double ll_again = load_model(o.out_path, comm).run("loglik", pr.inputs).item();
  std::printf("\nfitted model written to %s (reloaded: log-likelihood %s)\n", o.out_path.c_str(),
              ll_again == model.run("loglik", pr.inputs).item() ? "identical" : "DIFFERS");
  const std::vector<std::string> outputs = model.outputs();
  for (const char* needed : {"smoothed", "smoothed_var", "forecast", "forecast_var"})
    if (std::find(outputs.begin(), outputs.end(), needed) == outputs.end()) {
      std::printf("states, forecasts and plot: skipped, the model has no output '%s'\n", needed);
      return;
    }
  TensorMap out = model.run(pr.inputs);
  for (auto& [name, t] : out) t = gather(t);  // every series, for the tables and the picture
  if (comm.rank() != 0) return;
  kalman::write_tables(o.states_path, o.forecast_path, pr.y, out);
  std::printf("states: %s, forecasts (%lld steps ahead): %s\n", o.states_path.c_str(), (long long)o.horizon,
              o.forecast_path.c_str());
  if (o.no_plot) return;
  if (kalman::have_gnuplot())
    kalman::plot(o.plot_path, pr.y, pr.x_true.defined() ? &pr.x_true : nullptr, out);
  else
    std::printf("plot: skipped, gnuplot is not installed (apt-get install gnuplot-nox to get %s)\n",
                o.plot_path.c_str());
}

// The whole run; returns the exit status (0 converged, 3 not converged).
int run(Options& o, const Communicator& comm) {
  const Device device = parse_device(o.device_name);  // checked before any work
  const json doc = model_document(o.model_path);
  if (comm.rank() == 0)
    for (const std::string& path : {o.out_path, o.states_path, o.forecast_path}) check_writable(path);
  const Problem pr = load_problem(o, doc, comm);
  // The fit runs on `device`: its inputs are copied there once (the model's own data and constants
  // by set_device); parameters stay on the host. --start zero: unconstrained coordinates 0.
  Model model = pr.truth;
  model.set_device(device);
  if (o.start_from == "zero")
    model.set_unconstrained_vector(std::vector<double>(pr.truth.unconstrained_vector().size(), 0.0));
  const Model start = model;
  const kalman::FitResult fit = run_fit(model, pr.inputs, device, o);
  std::printf("log-likelihood: fitted %.6f", fit.loglik);
  if (o.csv_path.empty()) std::printf(", at the true parameters %.6f", pr.truth.run("loglik", pr.inputs).item());
  const kalman::Uncertainty unc = uncertainty_at(model, pr.inputs, fit);
  kalman::print_parameters(model, o.csv_path.empty() ? pr.truth : start, o.csv_path.empty() ? "true" : "initial",
                           fit, unc);
  write_results(model, pr, o);
  return fit.converged ? 0 : 3;  // 3: a result, but not an optimum; scripts must not take it for one
}

}  // namespace

// MPI for the program's life where the build has it (one rank when started without mpirun);
// ranks other than 0 write nothing to stdout or stderr (every rank raises the same agreed Error).
struct Session {
  Communicator comm;
  Session(int& argc, char**& argv) {
#ifdef TENAX_KALMAN_MPI
    MPI_Init(&argc, &argv);
    comm = Communicator::world();
    if (comm.rank() != 0) {
      (void)std::freopen("/dev/null", "w", stdout);
      (void)std::freopen("/dev/null", "w", stderr);
    }
#else
    (void)argc;
    (void)argv;
#endif
  }
  ~Session() {
#ifdef TENAX_KALMAN_MPI
    comm = Communicator();  // Tenax's duplicate of the world communicator freed before MPI is finalised
    MPI_Finalize();
#endif
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

int main(int argc, char** argv) {
  CLI::App app{"Tenax Kalman example: maximum-likelihood fit of a linear-Gaussian state-space model"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);
  if (o.start_from.empty()) o.start_from = o.csv_path.empty() ? "zero" : "model";
  Session session(argc, argv);
  try {
    // Every rank runs the whole program; an Error on one rank raises on all (Communicator::run).
    return session.comm.run([&] { return run(o, session.comm); });
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // a dependency's or the standard library's: still one line
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
