#pragma once
// The op reference (docs/ops.md) and the op nodes' schema (model/ops.schema.json), generated from the op
// definitions: test_model fails when the committed files differ from what these return.
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tenax::model_detail {

/// docs/ops.md: every registered op with its inputs, attributes, derivatives and one line of doc.
std::string op_reference_markdown();

/// model/ops.schema.json (model/schema.json refers to it for a registered op's node): one branch
/// per registered op, its inputs and attributes.
nlohmann::json registered_op_schema();

}  // namespace tenax::model_detail
