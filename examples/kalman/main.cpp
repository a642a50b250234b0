// The flagship example: fit a linear-Gaussian state-space model's parameters by maximising the
// Kalman-filter log-likelihood with L-BFGS, gradients by reverse mode through the scan.
//
//   tenax_kalman_fit                       simulate from the embedded model, fit, report, save, plot
//   tenax_kalman_fit --series 16 --steps 2000
//   tenax_kalman_fit --csv observations.csv   (one series: rows are time steps, columns obs)
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

namespace {

using namespace tenax;
using nlohmann::json;

std::string index_label(const Axes& axes, int64_t flat) {
  if (axes.rank() == 0) return "";
  std::string s = "[";
  int64_t stride = axes.numel();
  for (int i = 0; i < axes.rank(); ++i) {
    stride /= axes.size(i);
    if (i) s += ',';
    s += std::to_string((flat / stride) % axes.size(i));
  }
  return s + "]";
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

// Column k of a (series, time, axis) tensor's series 0, in time order.
std::vector<double> column(const Tensor& t, const char* axis, int64_t k) {
  return select(select(t, "series", 0), axis, k).to_vector();
}

// Series 0: observation 0, true, filtered and smoothed state 0 (with a 95% band), and the
// forecasts of observation 0 past the data (with theirs).
void plot(const std::filesystem::path& png, const Tensor& y, const Tensor* x_true, const TensorMap& out) {
  const std::filesystem::path dat = std::filesystem::path(png).replace_extension(".dat");
  const std::vector<double> yv = column(y, "obs", 0), fv = column(out.at("filtered"), "state", 0),
                            sv = column(out.at("smoothed"), "state", 0),
                            svar = select(select(out.at("smoothed_var"), "state", 0), "state2", 0).to_vector(),
                            hv = column(out.at("forecast"), "obs", 0), hvar = column(out.at("forecast_var"), "obs", 0);
  std::vector<double> xv;
  if (x_true) xv = column(*x_true, "state", 0);
  {
    std::ofstream f(dat);
    for (size_t t = 0; t < yv.size(); ++t)
      f << t << ' ' << yv[t] << ' ' << (x_true ? xv[t] : NAN) << ' ' << fv[t] << ' ' << sv[t] << ' '
        << 1.96 * std::sqrt(svar[t]) << " NaN NaN\n";
    for (size_t h = 0; h < hv.size(); ++h)
      f << yv.size() + h << " NaN NaN NaN NaN NaN " << hv[h] << ' ' << 1.96 * std::sqrt(hvar[h]) << '\n';
  }
  const std::filesystem::path gp = std::filesystem::path(png).replace_extension(".gp");
  {
    std::ofstream f(gp);
    f << "set terminal pngcairo size 1200,500\nset output '" << png.string() << "'\n"
      << "set title 'Kalman filter and smoother, series 0: observation 0, state 0, forecasts'\n"
      << "set xlabel 'time'\nset key outside\nset datafile missing 'NaN'\n"
      << "plot '" << dat.string() << "' using 1:($5-$6):($5+$6) with filledcurves fc rgb '#c8d8f0' title 'smoothed 95%', "
      << "'' using 1:($7-$8):($7+$8) with filledcurves fc rgb '#f0d0c0' title 'forecast 95%', "
      << "'' using 1:2 with points pt 7 ps 0.4 lc rgb 'black' title 'observed y[0]'"
      << (x_true ? ", '' using 1:3 with lines lw 1 lc rgb 'gray40' title 'true x[0]'" : "")
      << ", '' using 1:4 with lines lw 1 lc rgb '#2060c0' dt 2 title 'filtered x[0]'"
      << ", '' using 1:5 with lines lw 2 lc rgb '#2060c0' title 'smoothed x[0]'"
      << ", '' using 1:7 with lines lw 2 lc rgb '#c04020' title 'forecast y[0]'\n";
  }
  const std::string cmd = "gnuplot '" + gp.string() + "'";
  if (std::system(cmd.c_str()) == 0)
    std::printf("plot: %s\n", png.string().c_str());
  else
    std::printf("plot: gnuplot failed on %s (data kept in %s)\n", gp.string().c_str(), dat.string().c_str());
}

// Per series and time step: the observations, the filtered and smoothed states with the smoothed
// standard deviations; then per series and step ahead: the forecast means and standard deviations.
void write_tables(const std::string& states_path, const std::string& forecast_path, const Tensor& y,
                  const TensorMap& out) {
  const Tensor yv = contiguous(transpose(y, {"series", "time", "obs"}));
  const Tensor fv = contiguous(transpose(out.at("filtered"), {"series", "time", "state"}));
  const Tensor sv = contiguous(transpose(out.at("smoothed"), {"series", "time", "state"}));
  const Tensor vv = contiguous(diagonal(out.at("smoothed_var"), "state", "state2"));
  const Tensor sd = contiguous(transpose(sqrt(vv), {"series", "time", "state"}));
  const int64_t S = yv.size("series"), T = yv.size("time"), p = yv.size("obs"), n = fv.size("state");
  const std::vector<double> a = yv.to_vector(), b = fv.to_vector(), c = sv.to_vector(), d = sd.to_vector();
  {
    std::ofstream f(states_path);
    f << "series,time";
    for (int64_t i = 0; i < p; ++i) f << ",y" << i;
    for (const char* what : {"filtered", "smoothed", "smoothed_sd"})
      for (int64_t i = 0; i < n; ++i) f << ',' << what << i;
    f << '\n' << std::setprecision(10);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < T; ++t) {
        f << s << ',' << t;
        for (int64_t i = 0; i < p; ++i) {
          const double v = a[size_t((s * T + t) * p + i)];
          f << ',';
          if (!std::isnan(v)) f << v;  // a missing observation stays an empty cell
        }
        for (const std::vector<double>* v : {&b, &c, &d})
          for (int64_t i = 0; i < n; ++i) f << ',' << (*v)[size_t((s * T + t) * n + i)];
        f << '\n';
      }
    if (!f) throw Error("writing '" + states_path + "' failed");
  }
  const Tensor hm = contiguous(transpose(out.at("forecast"), {"series", "horizon", "obs"}));
  const Tensor hs = contiguous(transpose(sqrt(out.at("forecast_var")), {"series", "horizon", "obs"}));
  const int64_t H = hm.size("horizon");
  const std::vector<double> m = hm.to_vector(), v = hs.to_vector();
  std::ofstream f(forecast_path);
  f << "series,steps_ahead";
  for (int64_t i = 0; i < p; ++i) f << ",mean" << i;
  for (int64_t i = 0; i < p; ++i) f << ",sd" << i;
  f << '\n' << std::setprecision(10);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h) {
      f << s << ',' << h + 1;
      for (const std::vector<double>* w : {&m, &v})
        for (int64_t i = 0; i < p; ++i) f << ',' << (*w)[size_t((s * H + h) * p + i)];
      f << '\n';
    }
  if (!f) throw Error("writing '" + forecast_path + "' failed");
}

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tenax Kalman example: maximum-likelihood fit of a linear-Gaussian state-space model"};
  std::string model_path, csv_path, out_path = "kalman_fitted.json", plot_path = "kalman.png",
                                    device_name = "cpu";
  int64_t series = 16, steps = 1000;
  int64_t seed = 42;
  int max_iter = 200;
  int64_t horizon = 10;
  std::string states_path = "kalman_states.csv", forecast_path = "kalman_forecast.csv";
  bool no_plot = false;
  app.add_option("--model", model_path, "model JSON (default: the embedded examples/kalman/model.json)");
  app.add_option("--series", series, "independent series to simulate (nmap over 'series')")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", steps, "time steps per series")->check(CLI::Range(2, 1 << 24));
  app.add_option("--seed", seed, "seed of the simulation")->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--csv", csv_path, "fit these observations instead (rows: time, columns: obs)");
  app.add_option("--max-iter", max_iter, "L-BFGS iteration limit")->check(CLI::Range(1, 100000));
  app.add_option("--out", out_path, "where to write the fitted model");
  app.add_option("--plot", plot_path, "PNG of observations, true and filtered states (needs gnuplot)");
  app.add_flag("--no-plot", no_plot, "do not plot");
  app.add_option("--horizon", horizon, "steps ahead to forecast (the model's axis 'horizon')")->check(CLI::Range(1, 100000));
  app.add_option("--states", states_path,
                 "CSV of the observations, filtered and smoothed states and the smoothed standard deviations");
  app.add_option("--forecasts", forecast_path, "CSV of the forecasts' means and standard deviations");
  app.add_option("--device", device_name,
                 "where the fit runs: cpu, cuda or cuda:N (data and constants are copied there once)");
  std::string start_from;
  app.add_option("--start", start_from,
                 "where the fit starts: 'model' (the model file's values) or 'zero' (unconstrained 0: F = 0, "
                 "Q = I, r = 0.69); default: model with --csv, zero when simulating (the model's values are "
                 "the truth then)")
      ->check(CLI::IsMember({"model", "zero"}));
  CLI11_PARSE(app, argc, argv);
  if (start_from.empty()) start_from = csv_path.empty() ? "zero" : "model";

  try {
    const Device device = parse_device(device_name);
    json doc = model_document(model_path);
    for (const std::string& path : {out_path, states_path, forecast_path}) check_writable(path);
    const bool has_observed = doc.contains("inputs") && doc["inputs"].is_object() && doc["inputs"].contains("observed");
    std::vector<std::string> lacking;  // outputs the tables and the plot need
    for (const char* o : {"smoothed", "smoothed_var", "forecast", "forecast_var"})
      if (!doc["outputs"].contains(o)) lacking.push_back(o);
    if (doc["axes"].contains("horizon")) doc["axes"]["horizon"] = horizon;
    const int64_t p = doc["axes"]["obs"].get<int64_t>();
    Tensor y, x_true;
    if (!csv_path.empty()) {
      y = kalman::read_csv_observations(csv_path, p, has_observed);
      series = 1;
      steps = y.size("time");
    }
    doc["axes"]["series"] = series;
    doc["axes"]["time"] = steps;
    const std::filesystem::path base =
        model_path.empty() ? std::filesystem::current_path() : std::filesystem::path(model_path).parent_path();
    const Model truth = load_model_json(doc, base);
    // The fit runs on `device` (checked here, before any work): its inputs are copied there once
    // (the model's own data and constants by set_device); parameters stay on the host.
    Model model = truth;
    model.set_device(device);
    if (csv_path.empty()) {
      const kalman::Simulation sim = kalman::simulate(truth, series, steps, uint64_t(seed));
      y = sim.y;
      x_true = sim.x;
      std::printf("simulated %lld series x %lld steps from the model's parameters (seed %llu)\n", (long long)series,
                  (long long)steps, (unsigned long long)seed);
    } else {
      const std::vector<double> v = y.to_vector();
      const auto gaps = std::count_if(v.begin(), v.end(), [](double x) { return std::isnan(x); });
      std::printf("read %lld observations of dimension %lld from %s (%lld values missing)\n", (long long)steps,
                  (long long)p, csv_path.c_str(), (long long)gaps);
    }
    TensorMap inputs = {{"y", y}};
    if (has_observed) inputs["observed"] = kalman::observed_mask(y);

    // --start zero: unconstrained coordinates 0 (F = 0, Q = I, r = softplus(0) = 0.69); --start
    // model: the file's values (the model as loaded).
    if (start_from == "zero")
      model.set_unconstrained_vector(std::vector<double>(truth.unconstrained_vector().size(), 0.0));
    const Model start = model;
    TensorMap fit_inputs;
    for (const auto& [name, t] : inputs) fit_inputs[name] = to(t, device);
    if (!(device == Device::cpu())) std::printf("fitting on %s\n", device.str().c_str());
    const double ll_true = truth.run("loglik", inputs).item();
    std::printf("trainable: ");
    for (const std::string& n : model.trainable()) std::printf("%s ", n.c_str());
    std::printf("(%zu unconstrained coordinates, starting from %s)\n\n", model.unconstrained_vector().size(),
                start_from == "zero" ? "unconstrained 0" : "the model's values");
    std::printf("%5s  %16s  %12s  %9s\n", "iter", "log-likelihood", "|grad|/obs", "time (s)");
    const kalman::FitResult fit =
        kalman::fit(model, fit_inputs, {max_iter, 1e-6}, [](const kalman::Progress& pr) {
          std::printf("%5d  %16.6f  %12.3e  %9.3f\n", pr.iteration, pr.loglik, pr.grad_norm, pr.seconds);
          std::fflush(stdout);
        });
    std::printf("\nL-BFGS: %d iterations, %d evaluations of value and gradient, %.2f s\n", fit.iterations,
                fit.evaluations, fit.seconds);
    if (fit.failed_points > 0)
      std::printf("%d trial points failed (a covariance not positive definite); the line search backed off\n",
                  fit.failed_points);
    std::printf("%s: %s\n", fit.converged ? "converged" : "NOT converged", fit.reason.c_str());
    std::printf("log-likelihood: fitted %.6f", fit.loglik);
    if (csv_path.empty()) std::printf(", at the true parameters %.6f", ll_true);
    // Standard errors from the observed information, only at an optimum and only when the
    // information is well conditioned (a table of false confidence is worse than none).
    kalman::Uncertainty unc;
    if (fit.converged) {
      unc = kalman::uncertainty(model, fit_inputs);
      if (unc.near_singular)
        std::printf("\nwarning: the observed information is near-singular (condition %.2e): the data do not "
                    "identify every parameter, so no standard errors are given\n",
                    unc.condition);
    }
    std::printf("\n\n%-10s %12s %12s %12s %12s\n", "parameter", csv_path.empty() ? "true" : "initial",
                fit.converged ? "fitted" : "last point", "s.e.", "difference");
    size_t flat = 0;
    for (const std::string& n : model.trainable()) {
      const Tensor a = csv_path.empty() ? truth.parameter(n) : start.parameter(n);
      const Tensor b = model.parameter(n);
      const std::vector<double> av = a.to_vector(b.axes().names()), bv = b.to_vector();
      for (size_t k = 0; k < bv.size(); ++k, ++flat) {
        char se[32] = "-";
        if (!unc.se.empty()) std::snprintf(se, sizeof se, "%.5f", unc.se[flat]);
        std::printf("%-10s %12.5f %12.5f %12s %12.5f\n", (n + index_label(b.axes(), int64_t(k))).c_str(), av[k],
                    bv[k], se, bv[k] - av[k]);
      }
    }

    model.save(out_path);
    model.set_device(Device::cpu());  // the checks and the plot below run on the host
    const Model reloaded = load_model(out_path);
    const double ll_again = reloaded.run("loglik", inputs).item();
    std::printf("\nfitted model written to %s (reloaded: log-likelihood %s)\n", out_path.c_str(),
                ll_again == model.run("loglik", inputs).item() ? "identical" : "DIFFERS");

    if (lacking.empty()) {
      const TensorMap out = model.run(inputs);
      write_tables(states_path, forecast_path, y, out);
      std::printf("states: %s, forecasts (%lld steps ahead): %s\n", states_path.c_str(), (long long)horizon,
                  forecast_path.c_str());
      if (!no_plot && have_gnuplot())
        plot(plot_path, y, x_true.defined() ? &x_true : nullptr, out);
      else if (!no_plot)
        std::printf("plot: skipped, gnuplot is not installed (apt-get install gnuplot-nox to get %s)\n", plot_path.c_str());
    } else {
      std::printf("states, forecasts and plot: skipped, the model has no output '%s'\n", lacking[0].c_str());
    }
    if (!fit.converged) return 3;  // a result, but not an optimum: scripts must not take it for one
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // a dependency's or the standard library's: still one line
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
