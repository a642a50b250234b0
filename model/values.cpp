// Reading and writing the numbers of parameters and inputs.
#include "tenax/model/values.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tenax/core/creation.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/model/json_input.h"

namespace tenax::model_detail {
namespace {

using json = nlohmann::json;

Tensor finish(const std::vector<double>& v, const Axes& axes, DType dtype) {
  Tensor t = tensor(v, axes);
  return dtype == DType::f64 ? t : astype(t, dtype);
}

void check_finite(double x, const std::string& where) {
  if (!std::isfinite(x)) throw ModelError(where + ": holds a non-finite number (" + std::to_string(x) + ")");
}

void walk(const json& v, const Axes& axes, int depth, std::vector<double>& out, const std::string& pointer) {
  if (depth == axes.rank()) {
    if (!v.is_number())
      throw ModelError(pointer + ": expected a number, got " + brief(v));
    const double x = v.get<double>();
    check_finite(x, pointer);
    out.push_back(x);
    return;
  }
  const int64_t n = axes.size(depth);
  if (!v.is_array() || static_cast<int64_t>(v.size()) != n)
    throw ModelError(pointer + ": expected a list of " + std::to_string(n) + " entries along axis '" +
                     axes.name(depth).str() + "' (axes " + axes.describe() + "), got " +
                     (v.is_array() ? std::to_string(v.size()) + " entries" : v.type_name()));
  for (int64_t k = 0; k < n; ++k) walk(v[size_t(k)], axes, depth + 1, out, pointer + "/" + std::to_string(k));
}

std::string read_file(const std::filesystem::path& file, const std::string& pointer) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ModelError(pointer + ": cannot open the data file '" + file.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Tensor values_from_json(const json& v, const Axes& axes, DType dtype, const std::string& pointer) {
  if (v.is_number()) {
    // One number for the whole array: straight into the tensor (no host vector first), so that
    // the memory budget sees the one allocation before anything is written.
    const double x = v.get<double>();
    check_finite(x, pointer);
    return full(axes, x, dtype);
  }
  // A nested list holds every number in the file, so its size is bounded by the text; the
  // reservation is capped because the axes, not yet checked against the list, may be huge.
  std::vector<double> out;
  out.reserve(static_cast<size_t>(std::min<int64_t>(axes.numel(), int64_t{1} << 20)));
  walk(v, axes, 0, out, pointer);
  return finish(out, axes, dtype);
}

Tensor values_from_csv(const std::filesystem::path& file, const Axes& axes, DType dtype, const std::string& pointer) {
  const std::string text = read_file(file, pointer);
  std::vector<double> out;
  std::istringstream lines(text);
  std::string line;
  int64_t row = 0;
  bool header_allowed = true;
  while (std::getline(lines, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<double> fields;
    bool numeric = true;
    std::istringstream cells(line);
    std::string cell;
    int64_t col = 0;
    while (std::getline(cells, cell, ',')) {
      ++col;
      const char* b = cell.c_str();
      char* e = nullptr;
      const double x = std::strtod(b, &e);
      while (*e == ' ' || *e == '\t') ++e;
      if (e == b || *e != '\0') {
        numeric = false;
        if (!header_allowed)
          throw ModelError(pointer + ": " + file.string() + " line " + std::to_string(row) + " column " +
                           std::to_string(col) + ": '" + cell + "' is not a number");
        break;
      }
      if (!std::isfinite(x))
        throw ModelError(pointer + ": " + file.string() + " line " + std::to_string(row) + " column " +
                         std::to_string(col) + ": holds a non-finite number (" + cell + ")");
      fields.push_back(x);
    }
    header_allowed = false;
    if (numeric) out.insert(out.end(), fields.begin(), fields.end());
  }
  if (static_cast<int64_t>(out.size()) != axes.numel())
    throw ModelError(pointer + ": " + file.string() + " holds " + std::to_string(out.size()) +
                     " numbers; the axes " + axes.describe() + " need " + std::to_string(axes.numel()) +
                     " (read row-major)");
  return finish(out, axes, dtype);
}

Tensor values_from_json_file(const std::filesystem::path& file, const Axes& axes, DType dtype,
                             const std::string& pointer) {
  const std::string text = read_file(file, pointer);
  const json v = parse_checked(text, pointer + ": " + file.string());
  return values_from_json(v, axes, dtype, pointer + " (" + file.string() + ")");
}

json values_to_json(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  const Axes& axes = t.axes();
  if (axes.rank() == 0) return v.at(0);
  // Build nested arrays from the innermost axis outwards.
  std::vector<json> level;
  level.reserve(v.size());
  for (double x : v) level.emplace_back(x);
  for (int d = axes.rank() - 1; d >= 0; --d) {
    const auto n = static_cast<size_t>(axes.size(d));
    std::vector<json> up;
    for (size_t k = 0; k < level.size(); k += n) up.emplace_back(json(std::vector<json>(level.begin() + long(k), level.begin() + long(k + n))));
    level = std::move(up);
  }
  return level.at(0);
}

}  // namespace tenax::model_detail
