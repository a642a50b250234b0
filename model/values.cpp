// Reading and writing the numbers of parameters and inputs.
#include "tenax/model/values.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <complex>
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

// Real parts `re` and imaginary parts `im` into a complex tensor of `dtype`.
Tensor finish_complex(const std::vector<double>& re, const std::vector<double>& im, const Axes& axes, DType dtype) {
  std::vector<std::complex<double>> v(re.size());
  for (size_t k = 0; k < re.size(); ++k) v[k] = {re[k], im[k]};
  Tensor t = tensor(v, axes);
  return dtype == DType::c128 ? t : astype(t, dtype);
}

void check_finite(double x, const std::string& where) {
  if (!std::isfinite(x)) throw ModelError(where + ": holds a non-finite number (" + std::to_string(x) + ")");
}

constexpr const char* kMissingHint = " (an input declared with \"missing\": true reads null as a missing value)";

// A complex literal {"re": x, "im": y} (both numbers, finite, no other key).
bool is_complex_literal(const json& v) { return v.is_object() && (v.contains("re") || v.contains("im")); }
std::pair<double, double> complex_literal(const json& v, const std::string& pointer) {
  for (const auto& [key, part] : v.items()) {
    if (key != "re" && key != "im")
      throw ModelError(pointer + "/" + key + ": unknown key of a complex number (expected {\"re\": x, \"im\": y})");
    if (!part.is_number()) throw ModelError(pointer + "/" + key + ": expected a number, got " + brief(part));
    check_finite(part.get<double>(), pointer + "/" + key);
  }
  if (!v.contains("re") || !v.contains("im"))
    throw ModelError(pointer + ": a complex number needs both \"re\" and \"im\"");
  return {v["re"].get<double>(), v["im"].get<double>()};
}

// One leaf: a number (imaginary part 0), for complex values also {"re": x, "im": y}; `im` is null
// for real values.
void leaf(const json& v, std::vector<double>& out, std::vector<double>* im, const std::string& pointer, bool missing) {
  if (missing && v.is_null()) {
    out.push_back(std::numeric_limits<double>::quiet_NaN());
    if (im) im->push_back(std::numeric_limits<double>::quiet_NaN());
    return;
  }
  if (im && is_complex_literal(v)) {
    const auto [re, imag] = complex_literal(v, pointer);
    out.push_back(re);
    im->push_back(imag);
    return;
  }
  if (!v.is_number())
    throw ModelError(pointer + ": expected a number" + std::string(im ? " or {\"re\": x, \"im\": y}" : "") + ", got " +
                     brief(v) + (v.is_null() ? kMissingHint : ""));
  const double x = v.get<double>();
  check_finite(x, pointer);
  out.push_back(x);
  if (im) im->push_back(0.0);
}

void walk(const json& v, const Axes& axes, int depth, std::vector<double>& out, std::vector<double>* im,
          const std::string& pointer, bool missing) {
  if (depth == axes.rank()) return leaf(v, out, im, pointer, missing);
  const int64_t n = axes.size(depth);
  if (!v.is_array() || static_cast<int64_t>(v.size()) != n)
    throw ModelError(pointer + ": expected a list of " + std::to_string(n) + " entries along axis '" +
                     axes.name(depth).str() + "' (axes " + axes.describe() + "), got " +
                     (v.is_array() ? std::to_string(v.size()) + " entries" : v.type_name()));
  for (int64_t k = 0; k < n; ++k)
    walk(v[size_t(k)], axes, depth + 1, out, im, pointer + "/" + std::to_string(k), missing);
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
  if (is_complex(dtype)) {
    std::vector<double> re, im;
    if (v.is_number() || is_complex_literal(v)) {  // one value for every element
      leaf(v, re, &im, pointer, false);
      return full(axes, std::complex<double>(re[0], im[0]), dtype);
    }
    walk(v, axes, 0, re, &im, pointer, missing);
    return finish_complex(re, im, axes, dtype);
  }
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
  walk(v, axes, 0, out, nullptr, pointer, missing);
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
  if (is_complex(dtype))
    throw ModelError(pointer + ": a CSV file holds real numbers; give complex values in \"value\" or a \"json\" file "
                     "({\"re\": x, \"im\": y} per element)");
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

std::vector<double> real_coordinates(const Tensor& t) {
  if (!is_complex(t.dtype())) return t.to_vector();
  std::vector<double> out;
  for (const std::complex<double>& z : t.to_complex_vector()) {
    out.push_back(z.real());
    out.push_back(z.imag());
  }
  return out;
}

Tensor from_real_coordinates(std::span<const double> v, const Axes& axes, DType dtype) {
  if (!is_complex(dtype)) return finish(std::vector<double>(v.begin(), v.end()), axes, dtype);
  std::vector<double> re, im;
  for (size_t k = 0; k + 1 < v.size(); k += 2) {
    re.push_back(v[k]);
    im.push_back(v[k + 1]);
  }
  return finish_complex(re, im, axes, dtype);
}

json values_to_json(const Tensor& t) {
  const Axes& axes = t.axes();
  // Leaves: numbers, or {"re": x, "im": y} for complex values.
  std::vector<json> level;
  if (is_complex(t.dtype())) {
    for (const std::complex<double>& z : t.to_complex_vector()) level.push_back(json{{"re", z.real()}, {"im", z.imag()}});
  } else {
    for (double x : t.to_vector()) level.emplace_back(x);
  }
  if (axes.rank() == 0) return level.at(0);
  // Build nested arrays from the innermost axis outwards.
  for (int d = axes.rank() - 1; d >= 0; --d) {
    const auto n = static_cast<size_t>(axes.size(d));
    std::vector<json> up;
    for (size_t k = 0; k < level.size(); k += n) up.emplace_back(json(std::vector<json>(level.begin() + long(k), level.begin() + long(k + n))));
    level = std::move(up);
  }
  return level.at(0);
}

}  // namespace tenax::model_detail
