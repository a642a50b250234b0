// The Kalman tool's report: the parameter table, the states and forecasts as CSV, and the picture.
#include "report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>

namespace kalman {

using namespace tenax;

namespace {

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

// Column k of a (series, time, axis) tensor's series 0, in time order.
std::vector<double> column(const Tensor& t, const char* axis, int64_t k) {
  return select(select(t, "series", 0), axis, k).to_vector();
}

}  // namespace

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

void print_parameters(const Model& model, const Model& reference, const char* reference_title, const FitResult& fit,
                      const Uncertainty& unc) {
  std::printf("\n\n%-10s %12s %12s %12s %12s\n", "parameter", reference_title,
              fit.converged ? "fitted" : "last point", "s.e.", "difference");
  size_t flat = 0;
  for (const std::string& n : model.trainable()) {
    const Tensor b = model.parameter(n);
    const std::vector<double> av = reference.parameter(n).to_vector(b.axes().names()), bv = b.to_vector();
    for (size_t k = 0; k < bv.size(); ++k, ++flat) {
      char se[32] = "-";
      if (!unc.se.empty()) std::snprintf(se, sizeof se, "%.5f", unc.se[flat]);
      std::printf("%-10s %12.5f %12.5f %12s %12.5f\n", (n + index_label(b.axes(), int64_t(k))).c_str(), av[k], bv[k],
                  se, bv[k] - av[k]);
    }
  }
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

}  // namespace kalman
