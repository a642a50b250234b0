// Simulation and L-BFGS fitting for the Kalman example.
#include "kalman.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <Eigen/Dense>
#include <Eigen/Eigenvalues>

#include "model_fit.h"

namespace kalman {

Simulation simulate(const tenax::Model& model, int64_t series, int64_t steps, uint64_t seed) {
  const tenax::ModelAxes& ax = model.axes();
  const int64_t n = ax.size_of("state"), p = ax.size_of("obs");
  const std::vector<double> F = model.parameter("F").to_vector({"state", "state2"});
  const std::vector<double> H = model.parameter("H").to_vector({"obs", "state"});
  const std::vector<double> r = model.parameter("r").to_vector();
  const std::vector<double> m0 = model.parameter("m0").to_vector();
  // Lower Cholesky factors of Q and P0 (row-major over (state, state2)) for the noise.
  auto factor = [&](const char* name) {
    return tenax::cholesky(model.parameter(name), "state", "state2").to_vector({"state", "state2"});
  };
  const std::vector<double> lq = factor("Q"), l0 = factor("P0");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  std::vector<double> ys, xs;
  ys.reserve(size_t(series * steps * p));
  xs.reserve(size_t(series * steps * n));
  std::vector<double> x(static_cast<size_t>(n)), e(static_cast<size_t>(n)), fx(static_cast<size_t>(n));
  for (int64_t s = 0; s < series; ++s) {
    // x_0 ~ N(m0, P0); the first observation is of x_1 = F x_0 + w_1, as the filter assumes.
    for (int64_t i = 0; i < n; ++i) e[size_t(i)] = z(rng);
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = m0[size_t(i)];
      for (int64_t k = 0; k <= i; ++k) x[size_t(i)] += l0[size_t(i * n + k)] * e[size_t(k)];
    }
    for (int64_t t = 0; t < steps; ++t) {
      for (int64_t i = 0; i < n; ++i) e[size_t(i)] = z(rng);
      for (int64_t i = 0; i < n; ++i) {
        double v = 0.0;
        for (int64_t k = 0; k < n; ++k) v += F[size_t(i * n + k)] * x[size_t(k)];
        for (int64_t k = 0; k <= i; ++k) v += lq[size_t(i * n + k)] * e[size_t(k)];
        fx[size_t(i)] = v;
      }
      x = fx;
      xs.insert(xs.end(), x.begin(), x.end());
      for (int64_t o = 0; o < p; ++o) {
        double v = std::sqrt(r[size_t(o)]) * z(rng);
        for (int64_t k = 0; k < n; ++k) v += H[size_t(o * n + k)] * x[size_t(k)];
        ys.push_back(v);
      }
    }
  }
  return {tenax::tensor(ys, tenax::Axes{{"series", series}, {"time", steps}, {"obs", p}}),
          tenax::tensor(xs, tenax::Axes{{"series", series}, {"time", steps}, {"state", n}})};
}

namespace {

// "<file> line L column C: " for messages.
std::string at(const std::string& path, int64_t line, int64_t column = 0) {
  return path + " line " + std::to_string(line) + (column ? " column " + std::to_string(column) : "") + ": ";
}

// A cell without its surrounding blanks.
std::string trimmed(const std::string& cell) {
  const size_t b = cell.find_first_not_of(" \t"), e = cell.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : cell.substr(b, e - b + 1);
}

// An empty cell, NA or nan (any case): a missing observation.
bool missing(const std::string& text) {
  std::string lower = text;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return lower.empty() || lower == "na" || lower == "nan";
}

// One CSV line's numbers, missing values as NaN when `allow_missing`; throws naming the cell.
std::vector<double> numbers(const std::string& line, const std::string& path, int64_t n, bool allow_missing) {
  std::vector<double> row;
  std::stringstream cells(line);
  std::string cell;
  int64_t column = 0;
  while (std::getline(cells, cell, ',')) {
    ++column;
    const std::string text = trimmed(cell);
    if (missing(text)) {
      if (!allow_missing)
        throw tenax::Error(at(path, n, column) + "a missing value ('" + text +
                           "'); this model has no input 'observed' to mark missing observations");
      row.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size())
      throw tenax::Error(at(path, n, column) + "'" + text.substr(0, 40) + "' is not a number (cells are separated by commas)");
    if (!std::isfinite(x)) throw tenax::Error(at(path, n, column) + "a non-finite value ('" + text + "')");
    row.push_back(x);
  }
  if (!line.empty() && line.back() == ',') {
    if (!allow_missing)
      throw tenax::Error(at(path, n, column + 1) + "a missing value (the line ends with a comma); this model has no "
                         "input 'observed' to mark missing observations");
    row.push_back(std::numeric_limits<double>::quiet_NaN());
  }
  return row;
}

// A header: no cell starts like a number and none is a missing-value token ("y1,y2"; not "NA,1.5",
// "NA,NA" or "1;2").
bool is_header(const std::string& line) {
  std::stringstream cells(line);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    const std::string text = trimmed(cell);
    char* end = nullptr;
    (void)std::strtod(text.c_str(), &end);
    if (missing(text) || end != text.c_str()) return false;
  }
  return true;
}

}  // namespace

tenax::Tensor read_csv_observations(const std::string& path, int64_t p, bool allow_missing) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw tenax::Error("'" + path + "' is not a file of observations (missing, a folder or a device)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tenax::Error("cannot read the observations file '" + path + "'");
  std::vector<double> v;
  std::string line;
  int64_t n = 0, rows = 0, blank = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.size() > 1 << 20) throw tenax::Error(at(path, n) + "a line longer than 1 MiB: not a CSV of observations");
    if (!line.empty() && line.back() == '\r') line.pop_back();
    for (const char ch : line)
      if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t')
        throw tenax::Error(at(path, n) + "binary data (byte " + std::to_string(int(static_cast<unsigned char>(ch))) +
                           "), not a CSV of observations");
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (!blank) blank = n;  // an error unless only blank lines follow (the file's end)
      continue;
    }
    if (blank) throw tenax::Error(at(path, blank) + "a blank line between observations (time steps would shift)");
    if (n == 1 && is_header(line)) continue;
    const std::vector<double> row = numbers(line, path, n, allow_missing);
    if (int64_t(row.size()) != p)
      throw tenax::Error(at(path, n) + "expected " + std::to_string(p) + " comma-separated values (one per observation), got " +
                         std::to_string(row.size()));
    v.insert(v.end(), row.begin(), row.end());
    ++rows;
  }
  if (rows < 2) throw tenax::Error(path + ": needs at least 2 lines of observations, found " + std::to_string(rows));
  if (std::all_of(v.begin(), v.end(), [](double x) { return std::isnan(x); }))
    throw tenax::Error(path + ": every observation is missing");
  return tenax::tensor(v, tenax::Axes{{"series", 1}, {"time", rows}, {"obs", p}});
}

tenax::Tensor observed_mask(const tenax::Tensor& y) {
  const tenax::Tensor yc = tenax::contiguous(tenax::transpose(y, {"series", "time", "obs"}));
  const int64_t S = yc.size("series"), T = yc.size("time"), p = yc.size("obs");
  const std::vector<double> v = yc.to_vector();
  std::vector<double> mask(size_t(T * p));
  for (int64_t k = 0; k < T * p; ++k) mask[size_t(k)] = std::isnan(v[size_t(k)]) ? 0.0 : 1.0;
  for (int64_t s = 1; s < S; ++s)
    for (int64_t k = 0; k < T * p; ++k)
      if (std::isnan(v[size_t(s * T * p + k)]) != (mask[size_t(k)] == 0.0))
        throw tenax::Error("series " + std::to_string(s) + " has its missing observations elsewhere than series 0 (time " +
                           std::to_string(k / p) + ", observation " + std::to_string(k % p) +
                           "): the model shares one pattern of gaps between series; fit such series one at a time");
  return tenax::tensor(mask, tenax::Axes{{"time", T}, {"obs", p}});
}

FitResult fit(tenax::Model& model, const tenax::TensorMap& inputs, const FitOptions& options,
              const std::function<void(const Progress&)>& progress) {
  // L-BFGS minimises -loglik / observations: a scale independent of the data's length.
  const tenax::Tensor& y = inputs.at("y");
  const std::optional<tenax::ShardInfo> split = tenax::sharding(y);  // every rank's observations
  const double count = double(split ? y.numel() / split->block.size * split->global : y.numel());
  const example::FitResult r = example::minimize(
      model, "loglik", inputs, -1.0 / count, {options.max_iterations, options.gradient_tolerance},
      [&](const example::Progress& p) {
        if (progress) progress({p.iteration, -p.objective * count, p.grad_norm, p.seconds});
      });
  return {r.iterations, r.evaluations, -r.objective * count, r.seconds, r.converged, r.reason, r.failed_points};
}

namespace {

// d f / d u at the model's point, column by column by central differences with steps
// rel (1 + |u_c|); f reads the model, which is left at its point.
Eigen::MatrixXd central_differences(tenax::Model& model, double rel, const std::function<std::vector<double>()>& f) {
  const std::vector<double> u0 = model.unconstrained_vector();
  const auto n = Eigen::Index(u0.size());
  Eigen::MatrixXd j(n, n);
  for (Eigen::Index c = 0; c < n; ++c) {
    const double h = rel * (1.0 + std::abs(u0[size_t(c)]));
    std::vector<double> up = u0, dn = u0;
    up[size_t(c)] += h;
    dn[size_t(c)] -= h;
    model.set_unconstrained_vector(up);
    const std::vector<double> fp = f();
    model.set_unconstrained_vector(dn);
    const std::vector<double> fm = f();
    for (Eigen::Index r = 0; r < n; ++r) j(r, c) = (fp[size_t(r)] - fm[size_t(r)]) / (2 * h);
  }
  model.set_unconstrained_vector(u0);
  return j;
}

// Minus the Hessian of loglik in unconstrained coordinates, by central differences of the exact
// gradient, symmetrised.
Eigen::MatrixXd observed_information(tenax::Model& model, const tenax::TensorMap& inputs) {
  const Eigen::MatrixXd hessian = central_differences(model, 1e-5, [&] {
    return tenax::Model::flatten(model.value_and_grad("loglik", inputs).grads);
  });
  return -0.5 * (hessian + hessian.transpose());
}

// The trainable parameters' constrained values, flattened as Model::flatten orders gradients.
std::vector<double> constrained_values(const tenax::Model& model) {
  std::vector<double> v;
  for (const std::string& name : model.trainable()) {
    const std::vector<double> p = model.parameter(name).to_vector();
    v.insert(v.end(), p.begin(), p.end());
  }
  return v;
}

}  // namespace

Uncertainty uncertainty(tenax::Model& model, const tenax::TensorMap& inputs) {
  const Eigen::MatrixXd info = observed_information(model, inputs);
  const Eigen::Index n = info.rows();
  Uncertainty out;
  out.information.assign(info.data(), info.data() + n * n);  // symmetric: row- and column-major agree
  // Coordinates the likelihood ignores have a zero row: leave them out.
  std::vector<Eigen::Index> active;
  for (Eigen::Index i = 0; i < n; ++i)
    if (info.row(i).cwiseAbs().maxCoeff() > 1e-8) active.push_back(i);
  const auto m = Eigen::Index(active.size());
  Eigen::MatrixXd sub(m, m);
  for (Eigen::Index a = 0; a < m; ++a)
    for (Eigen::Index b = 0; b < m; ++b) sub(a, b) = info(active[size_t(a)], active[size_t(b)]);
  const Eigen::VectorXd eig = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(sub).eigenvalues();
  out.condition = m == 0 || eig.minCoeff() <= 0.0 ? std::numeric_limits<double>::infinity()
                                                  : eig.maxCoeff() / eig.minCoeff();
  out.near_singular = !(out.condition <= 1e10);
  out.se_unconstrained.assign(size_t(n), 0.0);
  if (out.near_singular) return out;
  const Eigen::MatrixXd sub_cov = sub.inverse();
  Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(n, n);
  for (Eigen::Index a = 0; a < m; ++a)
    for (Eigen::Index b = 0; b < m; ++b) cov(active[size_t(a)], active[size_t(b)]) = sub_cov(a, b);
  for (Eigen::Index i = 0; i < n; ++i) out.se_unconstrained[size_t(i)] = std::sqrt(std::max(cov(i, i), 0.0));
  // d (constrained values) / d u: central differences of the constraint maps (cheap: no filter).
  const Eigen::MatrixXd j = central_differences(model, 1e-6, [&] { return constrained_values(model); });
  const Eigen::MatrixXd cov_values = j * cov * j.transpose();
  for (Eigen::Index i = 0; i < n; ++i) out.se.push_back(std::sqrt(std::max(cov_values(i, i), 0.0)));
  return out;
}

std::vector<double> standard_errors(tenax::Model& model, const tenax::TensorMap& inputs) {
  const Uncertainty u = uncertainty(model, inputs);
  if (u.near_singular) return std::vector<double>(u.se_unconstrained.size(), 0.0);
  return u.se_unconstrained;
}

}  // namespace kalman
