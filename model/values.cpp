// Reading and writing the numbers of parameters and inputs.
#include "tenax/model/values.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
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

constexpr const char* kMissingHint = " (an input declared with \"missing\": true reads null as a missing value)";

void walk(const json& v, const Axes& axes, int depth, std::vector<double>& out, const std::string& pointer,
          bool missing) {
  if (depth == axes.rank()) {
    if (missing && v.is_null()) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    if (!v.is_number())
      throw ModelError(pointer + ": expected a number, got " + brief(v) + (v.is_null() ? kMissingHint : ""));
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
  for (int64_t k = 0; k < n; ++k)
    walk(v[size_t(k)], axes, depth + 1, out, pointer + "/" + std::to_string(k), missing);
}

std::string read_file(const std::filesystem::path& file, const std::string& pointer) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ModelError(pointer + ": cannot open the data file '" + file.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trimmed(const std::string& cell) {
  const size_t b = cell.find_first_not_of(" \t"), e = cell.find_last_not_of(" \t");
  return b == std::string::npos ? "" : cell.substr(b, e - b + 1);
}

// An empty cell, NA or nan in any case: a missing value.
bool is_missing_token(const std::string& t) {
  std::string lower = t;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return lower.empty() || lower == "na" || lower == "nan";
}

// A first line none of whose cells is a number or a missing-value token ("a,b"; not "NA,1.5").
bool is_header_line(const std::string& line) {
  std::istringstream cells(line);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    const std::string t = trimmed(cell);
    char* e = nullptr;
    (void)std::strtod(t.c_str(), &e);
    if (is_missing_token(t) || e != t.c_str()) return false;
  }
  return true;
}

// One line's numbers; missing values (when allowed) as NaN; `at` names the file and line.
std::vector<double> csv_numbers(const std::string& line, const std::string& at, bool missing) {
  std::vector<double> fields;
  std::istringstream cells(line);
  std::string cell;
  int64_t col = 0;
  const auto bad = [&](const std::string& what) {
    return ModelError(at + " column " + std::to_string(col) + ": " + what);
  };
  const char* hint = " (an input declared with \"missing\": true reads empty, NA and nan cells as missing values)";
  while (std::getline(cells, cell, ',')) {
    ++col;
    const std::string t = trimmed(cell);
    if (is_missing_token(t)) {
      if (!missing) throw bad("'" + t + "' is a missing value" + hint);
      fields.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    char* e = nullptr;
    const double x = std::strtod(t.c_str(), &e);
    if (e != t.c_str() + t.size()) throw bad("'" + t.substr(0, 40) + "' is not a number");
    if (!std::isfinite(x)) throw bad("holds a non-finite number (" + t + ")");
    fields.push_back(x);
  }
  if (line.back() == ',') {  // getline drops the empty last cell
    ++col;
    if (!missing) throw bad("an empty cell (the line ends with a comma)" + std::string(hint));
    fields.push_back(std::numeric_limits<double>::quiet_NaN());
  }
  return fields;
}

}  // namespace

Tensor values_from_json(const json& v, const Axes& axes, DType dtype, const std::string& pointer, bool missing) {
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
  walk(v, axes, 0, out, pointer, missing);
  return finish(out, axes, dtype);
}

Tensor values_from_csv(const std::filesystem::path& file, const Axes& axes, DType dtype, const std::string& pointer,
                       bool missing) {
  return values_from_csv_block(file, axes, dtype, pointer, missing, 0, axes.numel());
}

// Lines wholly outside the block are counted (cells by commas), not converted: a rank reads its
// own values only.
Tensor values_from_csv_block(const std::filesystem::path& file, const Axes& block, DType dtype,
                             const std::string& pointer, bool missing, int64_t first, int64_t total) {
  const std::string text = read_file(file, pointer);
  const int64_t last = first + block.numel();
  std::vector<double> out;
  std::istringstream lines(text);
  std::string line;
  int64_t row = 0, blank = 0, width = -1, seen = 0;
  while (std::getline(lines, line)) {
    ++row;
    const std::string at = pointer + ": " + file.string() + " line " + std::to_string(row);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (!blank) blank = row;  // an error unless only blank lines follow
      continue;
    }
    if (blank)
      throw ModelError(pointer + ": " + file.string() + " line " + std::to_string(blank) +
                       ": a blank line between lines of numbers" + (missing ? " (write NA for a missing value)" : ""));
    if (row == 1 && is_header_line(line)) continue;
    int64_t cells = 1 + static_cast<int64_t>(std::count(line.begin(), line.end(), ','));
    if (width < 0 || (seen + cells > first && seen < last)) {
      const std::vector<double> fields = csv_numbers(line, at, missing);
      cells = static_cast<int64_t>(fields.size());
      for (int64_t k = std::max<int64_t>(first - seen, 0); k < cells && seen + k < last; ++k)
        out.push_back(fields[static_cast<size_t>(k)]);
    }
    if (width >= 0 && cells != width)
      throw ModelError(at + ": " + std::to_string(cells) + " values, the lines before have " + std::to_string(width));
    width = cells;
    seen += cells;
  }
  if (seen != total)
    throw ModelError(pointer + ": " + file.string() + " holds " + std::to_string(seen) + " numbers; the axes " +
                     (total == block.numel() ? block.describe() + " " : "") + "need " + std::to_string(total) +
                     " (read row-major)");
  return finish(out, block, dtype);
}

Tensor values_from_json_file(const std::filesystem::path& file, const Axes& axes, DType dtype,
                             const std::string& pointer, bool missing) {
  const std::string text = read_file(file, pointer);
  const json v = parse_checked(text, pointer + ": " + file.string());
  return values_from_json(v, axes, dtype, pointer + " (" + file.string() + ")", missing);
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
