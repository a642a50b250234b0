#pragma once
// Numbers for parameters and inputs: inline nested JSON arrays, CSV files and JSON files, each
// checked against the declared axes (count, nesting, finiteness) with the JSON pointer in errors.
// An input declared with "missing": true reads missing values as NaN (JSON null; in CSV an empty
// cell, NA or nan in any case); nothing else that is not a finite number is accepted.
#include <filesystem>
#include <span>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tenax/core/tensor.h"

namespace tenax::model_detail {

/// A nested array whose nesting follows `axes` (outermost first), or one number for every element.
Tensor values_from_json(const nlohmann::json& v, const Axes& axes, DType dtype, const std::string& pointer,
                        bool missing = false);
/// A CSV file of numbers read row-major into `axes`: a first line with no number and no
/// missing-value token is a header; every line has as many cells as the first; blank lines only
/// at the end. Errors name the file, line and column.
Tensor values_from_csv(const std::filesystem::path& file, const Axes& axes, DType dtype, const std::string& pointer,
                       bool missing = false);
/// The values of a CSV file (as values_from_csv reads it, `total` values in all) with flat row-major
/// index in [first, first + block.numel()), into `block`: a rank's block along the first axis.
Tensor values_from_csv_block(const std::filesystem::path& file, const Axes& block, DType dtype,
                             const std::string& pointer, bool missing, int64_t first, int64_t total);
/// A JSON file holding a nested array as values_from_json reads it.
Tensor values_from_json_file(const std::filesystem::path& file, const Axes& axes, DType dtype,
                             const std::string& pointer, bool missing = false);

/// A tensor's values row-major as real numbers: a complex element as its (real, imaginary) pair.
std::vector<double> real_coordinates(const Tensor& t);
/// The inverse: a tensor of `dtype` over `axes` from those coordinates.
Tensor from_real_coordinates(std::span<const double> v, const Axes& axes, DType dtype);

/// Nested array of a tensor's values (outermost axis first), numbers written so they read back
/// bit for bit.
nlohmann::json values_to_json(const Tensor& t);

}  // namespace tenax::model_detail
