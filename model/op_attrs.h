#pragma once
// How each registered op's attributes are spelled in a model file, and their parsing into Attrs.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tenax/core/ops/op.h"

namespace tenax::model_detail {

enum class AttrKind {
  names,    ///< list of axis names -> Attrs::axes
  names2,   ///< list of axis names -> Attrs::axes2
  name,     ///< one axis name, appended to Attrs::axes (fields in table order)
  shape,    ///< list of declared axis names -> Attrs::shape with the model's sizes
  integer,  ///< -> Attrs::i[slot]
  boolean,  ///< -> Attrs::i[slot] (0 or 1)
  dtype,    ///< "float64" | "float32" | "int64" | "bool" -> Attrs::i[slot]
};

struct AttrField {
  const char* key;
  AttrKind kind;
  int slot = 0;
  bool required = true;
  int64_t fallback = 0;  ///< integer/boolean default when not required
  /// The named axes get their size from the op, not from an input (rename's targets, stack's new
  /// axis): the result must have them at their declared sizes.
  bool sizes_axes = false;
};

/// The attribute fields of `op`, or null when the op reads no attributes.
const std::vector<AttrField>* attr_fields(const OpDef& op);

/// Parsed attributes of one node; `reduce_all` is set for a reduction given no "axes".
struct ParsedAttrs {
  Attrs attrs;
  bool reduce_all = false;
  /// Axes the result must have at these (declared) sizes, where the result shows them.
  Axes sized;
};

/// Parses `attrs` (an object, or null for none) for `op`; throws ModelError at `pointer` on an
/// unknown or missing attribute, a wrong type, or an axis the model does not declare.
ParsedAttrs parse_attrs(const OpDef& op, const nlohmann::json* attrs, const std::string& pointer,
                        const Axes& declared);

}  // namespace tenax::model_detail
