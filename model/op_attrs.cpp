// The parser of a node's attributes from JSON into Attrs, driven by the op's AttrSpec list.
#include "tenax/model/op_attrs.h"


#include <nlohmann/json.hpp>

#include "tenax/core/error.h"
#include "tenax/model/json_input.h"

namespace tenax::model_detail {
namespace {

using json = nlohmann::json;

std::string expected_keys(std::span<const AttrSpec> fields) {
  if (fields.empty()) return "none";
  std::string s;
  for (const AttrSpec& f : fields) s += (s.empty() ? "" : ", ") + std::string(f.key);
  return s;
}

Name axis_name(const json& v, const std::string& pointer, const ModelAxes& declared) {
  if (!v.is_string()) throw ModelError(pointer + ": expected an axis name (a string), got " + brief(v));
  const std::string& s = v.get_ref<const std::string&>();
  if (!declared.contains(Name(s)))
    throw ModelError(pointer + ": unknown axis '" + s + "'; the model declares " + declared.describe() +
                     " under /axes");
  return Name(s);
}

AxisList axis_list(const json& v, const std::string& pointer, const ModelAxes& declared) {
  if (!v.is_array()) throw ModelError(pointer + ": expected a list of axis names, got " + brief(v));
  AxisList out;
  for (std::size_t k = 0; k < v.size(); ++k) {
    const std::string at = pointer + "/" + std::to_string(k);
    const Name n = axis_name(v[k], at, declared);
    if (out.contains(n)) throw ModelError(at + ": axis '" + n.str() + "' is listed twice");
    out.push_back(n);
  }
  return out;
}

// Every key of `attrs` is one of the op's attributes.
void check_keys(const OpDef& op, const json* attrs, const std::string& pointer) {
  if (attrs && !attrs->is_null() && !attrs->is_object())
    throw ModelError(pointer + ": expected an object of attributes, got " + brief(*attrs));
  if (!attrs || !attrs->is_object()) return;
  for (const auto& [key, value] : attrs->items()) {
    bool known = false;
    for (const AttrSpec& f : op.attrs) known = known || key == f.key;
    if (!known)
      throw ModelError(pointer + "/" + key + ": unknown attribute '" + key + "' of op '" + op.name +
                       "' (expected: " + expected_keys(op.attrs) + ")");
  }
}

DType dtype_of(const json& v, const std::string& at) {
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  if (s == "float64") return DType::f64;
  if (s == "float32") return DType::f32;
  if (s == "int64") return DType::i64;
  if (s == "bool") return DType::b8;
  if (s == "complex128") return DType::c128;
  if (s == "complex64") return DType::c64;
  throw ModelError(at + ": expected one of \"float64\", \"float32\", \"int64\", \"bool\", \"complex128\", \"complex64\", got " +
                   brief(v));
}

// Attribute f given as v (at pointer `at`) into `out`.
void parse_field(const OpDef& op, const AttrSpec& f, const json& v, const std::string& at, const ModelAxes& declared,
                 ParsedAttrs& out) {
  switch (f.kind) {
    case AttrKind::names: out.attrs.axes = axis_list(v, at, declared); break;
    case AttrKind::names2:
      out.attrs.axes2 = axis_list(v, at, declared);
      if (f.sizes_axes)
        for (Name n : out.attrs.axes2) out.sized.push_back({n, declared.size_of(n)});
      break;
    case AttrKind::name: {
      const Name n = axis_name(v, at, declared);
      if (out.attrs.axes.contains(n))
        throw ModelError(at + ": axis '" + n.str() + "' is already given to op '" + op.name +
                         "' by another attribute; name two different axes");
      out.attrs.axes.push_back(n);
      if (f.sizes_axes) out.sized.push_back({n, declared.size_of(n)});
      break;
    }
    case AttrKind::shape:
      for (Name n : axis_list(v, at, declared)) out.attrs.shape.push_back({n, declared.size_of(n)});
      break;
    case AttrKind::integer:
      if (!v.is_number_integer()) throw ModelError(at + ": expected an integer, got " + brief(v));
      out.attrs.i[f.slot] = v.get<int64_t>();
      break;
    case AttrKind::boolean:
      if (!v.is_boolean()) throw ModelError(at + ": expected true or false, got " + brief(v));
      out.attrs.i[f.slot] = v.get<bool>() ? 1 : 0;
      break;
    case AttrKind::dtype: out.attrs.i[f.slot] = static_cast<int64_t>(dtype_of(v, at)); break;
  }
}

}  // namespace

ParsedAttrs parse_attrs(const OpDef& op, const json* attrs, const std::string& pointer, const ModelAxes& declared) {
  check_keys(op, attrs, pointer);
  ParsedAttrs out;
  for (const AttrSpec& f : op.attrs) {
    const json* v = (attrs && attrs->is_object() && attrs->contains(f.key)) ? &(*attrs)[f.key] : nullptr;
    if (v) {
      parse_field(op, f, *v, pointer + "/" + f.key, declared, out);
      continue;
    }
    if (f.required)
      throw ModelError(pointer + ": op '" + std::string(op.name) + "' needs the attribute '" + f.key +
                       "' (attributes: " + expected_keys(op.attrs) + ")");
    if (f.kind == AttrKind::integer || f.kind == AttrKind::boolean) out.attrs.i[f.slot] = f.fallback;
    if (f.all_when_absent) out.all_axes = true;
  }
  return out;
}

}  // namespace tenax::model_detail
