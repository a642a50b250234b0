#pragma once
// Numbers for parameters and inputs: inline nested JSON arrays, CSV files and JSON files, each
// checked against the declared axes (count, nesting, finiteness) with the JSON pointer in errors.
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tenax/core/tensor.h"

namespace tenax::model_detail {

/// A nested array whose nesting follows `axes` (outermost first), or one number for every element.
Tensor values_from_json(const nlohmann::json& v, const Axes& axes, DType dtype, const std::string& pointer);
/// A CSV file of numbers read row-major into `axes` (a first line that is not numeric is a header).
Tensor values_from_csv(const std::filesystem::path& file, const Axes& axes, DType dtype, const std::string& pointer);
/// A JSON file holding a nested array as values_from_json reads it.
Tensor values_from_json_file(const std::filesystem::path& file, const Axes& axes, DType dtype,
                             const std::string& pointer);
/// Nested array of a tensor's values (outermost axis first), numbers written so they read back
/// bit for bit.
nlohmann::json values_to_json(const Tensor& t);

}  // namespace tenax::model_detail
