#pragma once
// Reading JSON text a user may have written by hand or generated: nesting bounded, duplicate keys
// refused, syntax errors placed by line and column (nlohmann's messages); and short descriptions of values for error
// messages. Internal to the model layer.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tenax::model_detail {

/// Deepest nesting of arrays and objects a model file (or a JSON data file) may have. A model's
/// deepest legitimate value is a node inside nested bodies (3 levels per body, kMaxBodyDepth
/// bodies) or a parameter's nested array (one level per axis, at most 8).
inline constexpr int kMaxJsonDepth = 128;

/// Parses `text`; throws ModelError "<pointer>: ..." for a duplicate key or nesting deeper than
/// kMaxJsonDepth, and "<what>: ... at line L, column C" for a syntax error. `what` names the
/// document in messages ("/" for the model, or a data file's pointer and path).
nlohmann::json parse_checked(std::string_view text, const std::string& what);

/// Throws ModelError with the JSON pointer (below `pointer`) of the first value nested deeper than
/// kMaxJsonDepth. Walks without recursion, so any document can be checked.
void check_depth(const nlohmann::json& doc, const std::string& pointer = "");

/// A value in a few words for an error message: a number, string or literal as written (strings
/// cut at 60 characters); "an array of N entries" or "an object with N keys" otherwise.
std::string brief(const nlohmann::json& v);

}  // namespace tenax::model_detail
