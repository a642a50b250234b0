#pragma once
// Parsing a model node's attributes into Attrs, by the op's own AttrSpec list (core/ops/op.h).
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tenax/core/ops/op.h"
#include "tenax/model/model_axes.h"

namespace tenax::model_detail {

/// Parsed attributes of one node; `all_axes` is set where an attribute that means every axis when
/// absent (AttrSpec::all_when_absent: a reduction's "axes") is absent.
struct ParsedAttrs {
  Attrs attrs;
  bool all_axes = false;
  /// Axes the result must have at these (declared) sizes, where the result shows them.
  Axes sized;
};

/// Parses `attrs` (an object, or null for none) for `op`; throws ModelError at `pointer` on an
/// unknown or missing attribute, a wrong type, or an axis the model does not declare.
ParsedAttrs parse_attrs(const OpDef& op, const nlohmann::json* attrs, const std::string& pointer,
                        const ModelAxes& declared);

}  // namespace tenax::model_detail
