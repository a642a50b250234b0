// The op reference and the registered ops' schema, written from each OpDef and its AttrSpec list.
#include "tenax/model/op_reference.h"

#include <string>

#include <nlohmann/json.hpp>

#include "tenax/core/ops/op.h"

namespace tenax::model_detail {
namespace {

using json = nlohmann::json;

const char* kind_text(AttrKind k) {
  switch (k) {
    case AttrKind::names:
    case AttrKind::names2: return "list of axis names";
    case AttrKind::name: return "axis name";
    case AttrKind::shape: return "list of declared axis names";
    case AttrKind::integer: return "integer";
    case AttrKind::boolean: return "boolean";
    case AttrKind::dtype: return "dtype";
  }
  return "";
}

std::string default_text(const AttrSpec& a) {
  if (a.required) return "required";
  if (a.kind == AttrKind::boolean) return a.fallback ? "true" : "false";
  if (a.kind == AttrKind::integer) return std::to_string(a.fallback);
  return "optional";
}

std::string inputs_text(const OpDef& op) {
  std::string s = op.arity < 0 ? "1 or more" : std::to_string(op.arity);
  if (op.nondiff != 0 && op.vjp) {
    std::string which;
    for (int i = 0; i < 32; ++i)
      if (op.nondiff & (1u << i)) which += (which.empty() ? "" : ", ") + std::to_string(i);
    s += " (input " + which + " not differentiated)";
  }
  return s;
}

std::string derivatives_text(const OpDef& op) {
  if (!op.vjp && !op.jvp) return "none";
  std::string s = op.vjp ? "reverse" : "";
  if (op.jvp) s += s.empty() ? "forward" : ", forward";
  return s;
}

json attr_schema(const AttrSpec& a) {
  const json names = {{"type", "array"}, {"items", {{"type", "string"}}}};
  json s;
  switch (a.kind) {
    case AttrKind::names:
    case AttrKind::names2:
    case AttrKind::shape: s = names; break;
    case AttrKind::name: s = {{"type", "string"}}; break;
    case AttrKind::integer: s = {{"type", "integer"}}; break;
    case AttrKind::boolean: s = {{"type", "boolean"}}; break;
    case AttrKind::dtype: s = {{"enum", {"float64", "float32", "int64", "bool", "complex128", "complex64"}}}; break;
  }
  if (!a.required && a.kind == AttrKind::boolean) s["default"] = a.fallback != 0;
  if (!a.required && a.kind == AttrKind::integer) s["default"] = a.fallback;
  s["description"] = a.doc;
  return s;
}

json op_branch(const OpDef& op) {
  json inputs = {{"$ref", "schema.json#/$defs/refs"}};
  if (op.arity >= 0) {
    inputs["minItems"] = op.arity;
    inputs["maxItems"] = op.arity;
  } else {
    inputs["minItems"] = 1;
  }
  json b = {{"description", op.doc},
            {"required", {"name"}},
            {"additionalProperties", false},
            {"properties",
             {{"op", {{"const", op.name}}},
              {"name", {{"type", "string"}}},
              {"inputs", inputs},
              {"description", {{"type", "string"}}}}}};
  if (op.attrs.empty()) return b;
  json props = json::object(), required = json::array();
  for (const AttrSpec& a : op.attrs) {
    props[a.key] = attr_schema(a);
    if (a.required) required.push_back(a.key);
  }
  json attrs = {{"type", "object"}, {"additionalProperties", false}, {"properties", props}};
  if (!required.empty()) attrs["required"] = required;
  b["properties"]["attrs"] = attrs;
  if (!required.empty()) b["required"].push_back("attrs");
  return b;
}

}  // namespace

std::string op_reference_markdown() {
  std::string s =
      "# Op reference\n\n"
      "Generated from the op definitions (`core/ops/*.cpp`, `core/ops/elementwise.def`) by\n"
      "`model_detail::op_reference_markdown()`; `test_model` fails when this file differs. After\n"
      "changing an op, regenerate it and `model/schema.json`:\n"
      "`TENAX_REGENERATE_REFERENCE=1 build/test/tests/test_model --gtest_filter='OpReference.*'`.\n\n"
      "Every op is a C++ function of the same name (`core/ops.h`) and a model node `{\"op\": name}`\n"
      "(`docs/model_format.md`). Elementwise ops broadcast by axis name; T is the element type.\n"
      "Column complex: the op takes complex128 / complex64 operands (`docs/complex.md`); the others\n"
      "raise a DTypeError naming the op and the dtype.\n\n"
      "| op | inputs | derivatives | complex | what it computes |\n|---|---|---|---|---|\n";
  for (const OpDef* op : registered_ops())
    s += std::string("| ") + op->name + " | " + inputs_text(*op) + " | " + derivatives_text(*op) + " | " +
         (op->complex ? "yes" : "no") + " | " + op->doc + " |\n";
  s += "\n## Attributes\n\nIn a model file, under the node's `attrs`.\n\n"
       "| op | attribute | kind | default | meaning |\n|---|---|---|---|---|\n";
  for (const OpDef* op : registered_ops())
    for (const AttrSpec& a : op->attrs)
      s += std::string("| ") + op->name + " | `" + a.key + "` | " + kind_text(a.kind) + " | " + default_text(a) +
           " | " + a.doc + " |\n";
  return s;
}

json registered_op_schema() {
  json branches = json::array();
  for (const OpDef* op : registered_ops()) branches.push_back(op_branch(*op));
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "https://tenax.dev/model/ops.schema.json"},
          {"description",
           "A registered op's node in a Tenax model (model/schema.json refers here); generated from the op "
           "definitions with docs/ops.md."},
          {"oneOf", branches}};
}

}  // namespace tenax::model_detail
