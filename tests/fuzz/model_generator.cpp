// The loader fuzzer's document generator (see model_generator.h). It keeps, for every name it has
// defined, the axes that value is likely to have (exact for parameters and inputs, the union of
// the inputs' for op results), so that axis attributes, mapped axes and scanned axes are mostly
// ones the value has: the documents get past the loader's checks and into run().
#include "model_generator.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tenax/core/ops/op.h"

namespace tenax::fuzz {
namespace {

using json = nlohmann::json;
using AxisNames = std::vector<std::string>;

constexpr const char* kAxisNames[] = {"a", "b", "c", "t"};

// Rare choices take the top of their range: a provider out of bytes gives the bottom, and that
// should be the ordinary case.
bool rarely(FuzzedDataProvider& p, int one_in) { return p.ConsumeIntegralInRange<int>(1, one_in) == one_in; }

// Sizes: small ones nearly always, so that graphs run; extremes (past int64 products, past the
// element limit, zero, negative) now and then.
int64_t axis_size(FuzzedDataProvider& p) {
  static constexpr int64_t kExtreme[] = {0,
                                         -1,
                                         int64_t{1} << 30,
                                         (int64_t{1} << 56),
                                         (int64_t{1} << 56) + 1,
                                         (int64_t{1} << 62) + 1,
                                         INT64_MAX};
  return rarely(p, 32) ? p.PickValueInArray(kExtreme) : p.ConsumeIntegralInRange<int64_t>(1, 5);
}

// Integer attributes (slice bounds, select indices, options): small, or an extreme.
int64_t attr_integer(FuzzedDataProvider& p) {
  static constexpr int64_t kExtreme[] = {-1, INT64_MIN, INT64_MAX, int64_t{1} << 40, int64_t{1} << 62};
  return rarely(p, 8) ? p.PickValueInArray(kExtreme) : p.ConsumeIntegralInRange<int64_t>(0, 4);
}

struct Doc {
  std::vector<std::pair<std::string, int64_t>> axes;
  std::vector<std::string> names;         ///< values defined so far and visible here
  std::map<std::string, AxisNames> seen;  ///< the axes each name's value likely has
  int counter = 0;
};

int64_t size_of(const Doc& d, const std::string& axis) {
  for (const auto& [name, size] : d.axes)
    if (name == axis) return size;
  return 0;
}

AxisNames all_axes(const Doc& d) {
  AxisNames out;
  for (const auto& [name, size] : d.axes) out.push_back(name);
  return out;
}

// One of `from` (or of every declared axis, when `from` is empty or now and then).
std::string pick_axis(FuzzedDataProvider& p, const Doc& d, const AxisNames& from) {
  const AxisNames pool = from.empty() || rarely(p, 8) ? all_axes(d) : from;
  return pool[p.ConsumeIntegralInRange<size_t>(0, pool.size() - 1)];
}

AxisNames subset(FuzzedDataProvider& p, const AxisNames& from) {
  AxisNames out;
  for (const auto& a : from)
    if (p.ConsumeBool()) out.push_back(a);
  return out;
}

// A nested array following `axes` (sizes capped: a huge axis gets a short list, which the loader
// reports), or now and then one number for the whole array.
json values(FuzzedDataProvider& p, const Doc& d, const AxisNames& axes, double lo, double hi, size_t depth = 0) {
  if (depth == axes.size() || (depth == 0 && rarely(p, 4))) return p.ConsumeFloatingPointInRange(lo, hi);
  json list = json::array();
  for (int64_t k = 0; k < std::min<int64_t>(size_of(d, axes[depth]), 6); ++k)
    list.push_back(values(p, d, axes, lo, hi, depth + 1));
  return list;
}

json parameter(FuzzedDataProvider& p, const Doc& d, const AxisNames& axes) {
  json par = {{"axes", axes}};
  double lo = -3.0, hi = 3.0;
  switch (p.ConsumeIntegralInRange<int>(0, 5)) {
    case 1:
      par["constraint"] = "positive";
      lo = 0.1;
      break;
    case 2: par["constraint"] = {{"type", "interval"}, {"lower", -4.0}, {"upper", 4.0}}; break;
    case 3:
      if (axes.size() == 2 && size_of(d, axes[0]) == size_of(d, axes[1])) par["constraint"] = {{"type", "spd"}, {"row", axes[0]}, {"col", axes[1]}};
      break;
    case 4: par["trainable"] = false; break;
    default: break;
  }
  // Init rules draw unconstrained coordinates, valid under any constraint (an spd value is not).
  const bool spd = par.contains("constraint") && par["constraint"].is_object() && par["constraint"]["type"] == "spd";
  switch (spd ? 3 : p.ConsumeIntegralInRange<int>(0, 5)) {
    case 3: par["init"] = {{"rule", "normal"}, {"seed", p.ConsumeIntegral<uint16_t>()}, {"scale", 0.1}}; break;
    case 4: par["init"] = {{"rule", "uniform"}, {"seed", 1}, {"lower", -1.0}, {"upper", 1.0}}; break;
    case 5:
      if (axes.size() == 2 && size_of(d, axes[0]) == size_of(d, axes[1])) {
        par["init"] = {{"rule", "identity"}};
        break;
      }
      [[fallthrough]];
    default: par["value"] = values(p, d, axes, lo, hi);
  }
  return par;
}

// An input reference: a defined name, or now and then a literal number.
json reference(FuzzedDataProvider& p, const Doc& d) {
  if (d.names.empty() || rarely(p, 8)) return p.ConsumeFloatingPointInRange(-2.0, 2.0);
  return d.names[p.ConsumeIntegralInRange<size_t>(0, d.names.size() - 1)];
}

AxisNames axes_of(const Doc& d, const json& ref) {
  if (!ref.is_string()) return {};
  auto it = d.seen.find(ref.get<std::string>());
  return it == d.seen.end() ? AxisNames{} : it->second;
}

void define(Doc& d, const std::string& name, const AxisNames& axes) {
  d.names.push_back(name);
  d.seen[name] = axes;
}

std::string fresh(Doc& d) { return "n" + std::to_string(d.counter++); }

// Attributes from the format's table, mostly naming axes the first input has (one-axis
// attributes different ones, rename's two lists of one length).
json attributes(FuzzedDataProvider& p, const Doc& d, std::span<const AttrSpec> fields,
                const AxisNames& input_axes) {
  json attrs = json::object();
  AxisNames named;
  for (const auto& f : fields) {
    if (!f.required && !p.ConsumeBool()) continue;
    switch (f.kind) {
      case AttrKind::names:
      case AttrKind::shape: attrs[f.key] = subset(p, f.kind == AttrKind::shape ? all_axes(d) : input_axes); break;
      case AttrKind::names2: {
        AxisNames to = all_axes(d);
        to.resize(std::min(to.size(), attrs.value("from", json::array()).size()));
        attrs[f.key] = to;
        break;
      }
      case AttrKind::name: {
        AxisNames free;
        for (const auto& a : input_axes)
          if (std::find(named.begin(), named.end(), a) == named.end()) free.push_back(a);
        if (free.empty())
          for (const auto& a : all_axes(d))
            if (std::find(named.begin(), named.end(), a) == named.end()) free.push_back(a);
        named.push_back(pick_axis(p, d, free));
        attrs[f.key] = named.back();
        break;
      }
      case AttrKind::integer: attrs[f.key] = attr_integer(p); break;
      case AttrKind::boolean: attrs[f.key] = p.ConsumeBool(); break;
      case AttrKind::dtype: {
        static constexpr const char* kTypes[] = {"float64", "float32", "int64", "bool"};
        attrs[f.key] = p.PickValueInArray(kTypes);
        break;
      }
    }
  }
  return attrs;
}

json op_node(FuzzedDataProvider& p, Doc& d) {
  const auto& ops = registered_ops();
  const OpDef& op = *ops[p.ConsumeIntegralInRange<size_t>(0, ops.size() - 1)];
  const std::string name = fresh(d);
  json node = {{"name", name}, {"op", op.name}, {"inputs", json::array()}};
  const int n = op.arity >= 0 ? op.arity : p.ConsumeIntegralInRange<int>(1, 3);
  AxisNames axes;  // the union of the inputs' axes
  for (int k = 0; k < n; ++k) {
    node["inputs"].push_back(reference(p, d));
    for (const auto& a : axes_of(d, node["inputs"].back()))
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) axes.push_back(a);
  }
  if (!op.attrs.empty()) node["attrs"] = attributes(p, d, op.attrs, axes_of(d, node["inputs"][0]));
  define(d, name, axes);
  return node;
}

json graph(FuzzedDataProvider& p, Doc& d, int nodes, int depth);

// nmap or map over an axis of its input: the body reads its argument (and anything outside).
json mapping_node(FuzzedDataProvider& p, Doc& d, int depth) {
  const bool is_map = p.ConsumeBool();
  const json input = reference(p, d);
  const AxisNames in_axes = axes_of(d, input);
  const std::string over = pick_axis(p, d, in_axes), arg = fresh(d), out = fresh(d);
  json node = {{"op", is_map ? "map" : "nmap"}, {"inputs", {input}}, {"outputs", {out}}};
  node["over"] = is_map ? json(over) : json::array({over});
  if (is_map && p.ConsumeBool()) node["batch_size"] = attr_integer(p);
  const Doc outer = d;  // the body's names are local to it
  AxisNames arg_axes = in_axes;
  if (!is_map) arg_axes.erase(std::remove(arg_axes.begin(), arg_axes.end(), over), arg_axes.end());
  define(d, arg, arg_axes);
  json body = {{"args", {arg}}, {"graph", graph(p, d, p.ConsumeIntegralInRange<int>(1, 3), depth + 1)}};
  body["results"] = {d.names.back()};
  node["body"] = body;
  const int counter = d.counter;
  d = outer;
  d.counter = counter;
  define(d, out, in_axes);
  return node;
}

// A scan over an axis of its scanned input: a carry without that axis, a body combining them.
json scan_node(FuzzedDataProvider& p, Doc& d, int depth) {
  const json xs = reference(p, d);
  AxisNames x_axes = axes_of(d, xs);
  const std::string over = pick_axis(p, d, x_axes);
  x_axes.erase(std::remove(x_axes.begin(), x_axes.end(), over), x_axes.end());
  json init = p.ConsumeFloatingPointInRange(-1.0, 1.0);  // a scalar carry unless a value fits
  for (const auto& name : d.names)
    if (const AxisNames a = axes_of(d, name); std::find(a.begin(), a.end(), over) == a.end() && p.ConsumeBool()) {
      init = name;
      break;
    }
  const std::string carry = fresh(d), x = fresh(d), last = fresh(d), ys = fresh(d);
  json node = {{"op", "scan"}, {"over", over}, {"init", {init}}, {"xs", {xs}}, {"outputs", {last, ys}}};
  if (p.ConsumeBool()) node["checkpoint_every"] = attr_integer(p);
  if (p.ConsumeBool()) node["reverse"] = true;
  const Doc outer = d;
  define(d, carry, axes_of(d, init));
  define(d, x, x_axes);
  json body = {{"carry", {carry}}, {"x", {x}}, {"graph", graph(p, d, p.ConsumeIntegralInRange<int>(1, 3), depth + 1)}};
  body["carry_out"] = {d.names.back()};
  body["ys"] = {d.names.back()};
  node["body"] = body;
  const AxisNames step = d.seen[d.names.back()];
  const int counter = d.counter;
  d = outer;
  d.counter = counter;
  define(d, last, step);
  AxisNames stacked = step;
  stacked.push_back(over);
  define(d, ys, stacked);
  return node;
}

json graph(FuzzedDataProvider& p, Doc& d, int nodes, int depth) {
  json g = json::array();
  for (int k = 0; k < nodes && p.remaining_bytes() > 0; ++k) {
    const int kind = p.ConsumeIntegralInRange<int>(0, 11);
    if (kind == 10 && depth < 3) g.push_back(mapping_node(p, d, depth));
    else if (kind == 11 && depth < 3) g.push_back(scan_node(p, d, depth));
    else g.push_back(op_node(p, d));
  }
  return g;
}

// Now and then a value nested deep (around the loader's limit of 128 levels).
void maybe_nest(FuzzedDataProvider& p, json& doc) {
  if (!rarely(p, 32)) return;
  const int depth = p.ConsumeIntegralInRange<int>(100, 200);
  json v = 1;
  for (int k = 0; k < depth; ++k) v = json::array({std::move(v)});
  doc["parameters"]["deep"] = {{"axes", json::array()}, {"value", std::move(v)}};
}

}  // namespace

json generate_model(FuzzedDataProvider& p) {
  Doc d;
  json doc = {{"format", 1}, {"dtype", rarely(p, 4) ? "float32" : "float64"}};
  const int n_axes = p.ConsumeIntegralInRange<int>(1, 4);
  for (int k = 0; k < n_axes; ++k) d.axes.emplace_back(kAxisNames[k], axis_size(p));
  for (const auto& [name, size] : d.axes) doc["axes"][name] = size;
  const int n_params = p.ConsumeIntegralInRange<int>(1, 3);
  for (int k = 0; k < n_params; ++k) {
    const std::string name = "p" + std::to_string(k);
    const AxisNames axes = subset(p, all_axes(d));
    doc["parameters"][name] = parameter(p, d, axes);
    define(d, name, axes);
  }
  if (p.ConsumeBool()) {
    const AxisNames axes = subset(p, all_axes(d));
    doc["inputs"]["y"] = {{"axes", axes}, {"value", values(p, d, axes, -3.0, 3.0)}};
    define(d, "y", axes);
  }
  doc["graph"] = graph(p, d, p.ConsumeIntegralInRange<int>(1, 8), 0);
  doc["graph"].push_back({{"name", "loss"}, {"op", "sum"}, {"inputs", {d.names.back()}}});  // a scalar to differentiate
  doc["outputs"]["out"] = d.names.back();
  doc["outputs"]["loss"] = "loss";
  maybe_nest(p, doc);
  return doc;
}

}  // namespace tenax::fuzz
