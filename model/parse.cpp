// From a JSON document to a Definition: every key checked, every name resolved to a slot, nodes
// ordered so that each input is computed before it is read (cycles are errors).
#include <map>
#include <set>

#include "tenax/core/creation.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/model/definition.h"
#include "tenax/model/json_input.h"
#include "tenax/model/op_attrs.h"
#include "tenax/model/values.h"

namespace tenax::model_detail {

std::string pointer_join(const std::string& base, const std::string& key) {
  std::string k;
  for (char c : key) {
    if (c == '~') k += "~0";
    else if (c == '/') k += "~1";
    else k += c;
  }
  return base + "/" + k;
}
std::string pointer_join(const std::string& base, std::size_t index) { return base + "/" + std::to_string(index); }

namespace {

[[noreturn]] void fail(const std::string& pointer, const std::string& what) {
  throw ModelError((pointer.empty() ? std::string("/") : pointer) + ": " + what);
}

const json& need(const json& obj, const char* key, const std::string& pointer, const char* what) {
  if (!obj.contains(key)) fail(pointer, std::string("missing \"") + key + "\" (" + what + ")");
  return obj[key];
}

void only_keys(const json& obj, const std::string& pointer, std::initializer_list<const char*> keys) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const char* k : keys) ok = ok || key == k;
    if (!ok) {
      std::string list;
      for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(pointer_join(pointer, key), "unknown key \"" + key + "\" (expected: " + list + ")");
    }
  }
}

std::string string_at(const json& v, const std::string& pointer, const char* what) {
  if (!v.is_string()) fail(pointer, std::string("expected ") + what + " (a string), got " + brief(v));
  return v.get<std::string>();
}

/// Names visible in one graph and its enclosing graphs, with where each is defined.
struct Scope {
  const Scope* outer = nullptr;
  std::map<std::string, std::pair<int, std::string>> names;  // name -> (slot, pointer of definition)

  [[nodiscard]] const std::pair<int, std::string>* find(const std::string& n) const {
    for (const Scope* s = this; s; s = s->outer) {
      auto it = s->names.find(n);
      if (it != s->names.end()) return &it->second;
    }
    return nullptr;
  }
};

/// A reference in a node: a name (resolved later) or a literal number ({"re": x, "im": y}: a
/// complex one, of the model's complex dtype).
struct Ref {
  std::string name;
  double number = 0.0;
  double imag = 0.0;
  bool literal = false;
  bool complex = false;
  std::string pointer;
};

class Parser {
 public:
  explicit Parser(Definition& d) : d_(d) {}

  void document(const json& doc) {
    if (!doc.is_object()) fail("", "a model is a JSON object, got " + std::string(doc.type_name()));
    only_keys(doc, "", {"format", "name", "description", "dtype", "axes", "sharded", "parameters", "inputs", "graph", "outputs"});
    const json& format = need(doc, "format", "", "the format version: 1");
    if (!format.is_number_integer() || format.get<int64_t>() != 1)
      fail("/format", "this loader reads format 1, got " + brief(format));
    if (doc.contains("dtype")) {
      const std::string t = string_at(doc["dtype"], "/dtype", "\"float64\" or \"float32\"");
      if (t == "float64") d_.dtype = DType::f64;
      else if (t == "float32") d_.dtype = DType::f32;
      else fail("/dtype", "expected \"float64\" or \"float32\", got \"" + t + "\"");
    }
    axes(need(doc, "axes", "", "an object of axis names and sizes"));
    if (doc.contains("sharded")) sharded(doc["sharded"]);
    Scope top;
    if (doc.contains("parameters")) parameters(doc["parameters"], top);
    if (doc.contains("inputs")) inputs(doc["inputs"], top);
    const json empty = json::array();
    graph(doc.contains("graph") ? doc["graph"] : empty, "/graph", top, d_.graph);
    const json& outs = need(doc, "outputs", "", "an object naming the model's outputs");
    if (!outs.is_object() || outs.empty()) fail("/outputs", "expected a non-empty object {\"output\": \"name\"}");
    for (const auto& [name, ref] : outs.items()) {
      const std::string at = pointer_join("/outputs", name);
      const std::string target = string_at(ref, at, "the name of a parameter, input or node output");
      const auto* found = top.find(target);
      if (!found) fail(at, "unknown name '" + target + "'" + known(top));
      d_.outputs.emplace_back(name, found->first);
    }
  }

 private:
  Definition& d_;
  int body_depth_ = 0;  ///< bodies open around the one being built

  static std::string known(const Scope& s) {
    std::string list;
    int n = 0;
    for (const Scope* p = &s; p; p = p->outer)
      for (const auto& [name, v] : p->names)
        if (n++ < 12) list += (list.empty() ? "" : ", ") + name;
    return list.empty() ? "" : " (defined names include: " + list + ")";
  }

  void axes(const json& a) {
    if (!a.is_object()) fail("/axes", "expected an object of axis names and sizes, got " + brief(a));
    for (const auto& [name, size] : a.items()) {
      const std::string at = pointer_join("/axes", name);
      if (name.empty()) fail(at, "an axis needs a non-empty name");
      // 1 ... 2^56 (kMaxElements); a tensor's product of sizes is checked where it is made.
      const bool positive = size.is_number_unsigned() || (size.is_number_integer() && size.get<int64_t>() >= 1);
      const bool in_range = positive && size.get<uint64_t>() >= 1 && size.get<uint64_t>() <= uint64_t(kMaxElements);
      if (!in_range) fail(at, "expected a positive integer size (at most 2^56), got " + brief(size));
      try {
        d_.axes.add(Name(name), size.get<int64_t>());
      } catch (const Error& e) {  // a name that is not one
        fail(at, e.what());
      }
    }
  }

  Axes axes_of(const json& list, const std::string& at) {
    if (!list.is_array()) fail(at, "expected a list of axis names, got " + brief(list));
    Axes out;
    for (std::size_t k = 0; k < list.size(); ++k) {
      const std::string p = pointer_join(at, k);
      const std::string n = string_at(list[k], p, "an axis name");
      if (!d_.axes.contains(Name(n))) fail(p, "unknown axis '" + n + "'; the model declares " + d_.axes.describe());
      if (out.contains(Name(n))) fail(p, "axis '" + n + "' is listed twice");
      try {
        out.push_back({Name(n), d_.axes.size_of(Name(n))});
      } catch (const Error& e) {  // the sizes' product passes kMaxElements
        fail(p, e.what());
      }
    }
    return out;
  }

  void define(Scope& s, const std::string& name, int slot, const std::string& at) {
    if (name.empty()) fail(at, "a name must not be empty");
    if (const auto* prev = s.find(name)) fail(at, "the name '" + name + "' is already defined at " + prev->second);
    s.names[name] = {slot, at};
  }

  Constraint constraint(const json& c, const std::string& at, const Axes& axes) {
    Constraint out;
    std::string type;
    if (c.is_string()) {
      type = c.get<std::string>();
    } else if (c.is_object()) {
      only_keys(c, at, {"type", "transform", "lower", "upper", "row", "col"});
      type = string_at(need(c, "type", at, "unconstrained | positive | interval | spd"), at + "/type", "a type");
    } else {
      fail(at, "expected a constraint (a string or an object), got " + brief(c));
    }
    if (type == "unconstrained") return out;
    if (type == "positive") {
      out.kind = ConstraintKind::softplus;
      if (c.is_object() && c.contains("transform")) {
        const std::string t = string_at(c["transform"], at + "/transform", "\"softplus\" or \"exp\"");
        if (t == "exp") out.kind = ConstraintKind::exp;
        else if (t != "softplus") fail(at + "/transform", "expected \"softplus\" or \"exp\", got \"" + t + "\"");
      }
      return out;
    }
    if (type == "interval") {
      if (!c.is_object()) fail(at, "an interval needs {\"type\": \"interval\", \"lower\": a, \"upper\": b}");
      const json& lo = need(c, "lower", at, "the lower bound");
      const json& hi = need(c, "upper", at, "the upper bound");
      if (!lo.is_number() || !hi.is_number() || !(lo.get<double>() < hi.get<double>()))
        fail(at, "expected numbers lower < upper, got " + brief(lo) + " and " + brief(hi));
      out.kind = ConstraintKind::interval;
      out.lower = lo.get<double>();
      out.upper = hi.get<double>();
      return out;
    }
    if (type == "spd") {
      if (!c.is_object()) fail(at, "spd needs {\"type\": \"spd\", \"row\": axis, \"col\": axis}");
      out.kind = ConstraintKind::spd;
      out.row = Name(string_at(need(c, "row", at, "the row axis"), at + "/row", "an axis name"));
      out.col = Name(string_at(need(c, "col", at, "the column axis"), at + "/col", "an axis name"));
      if (axes.rank() != 2 || !axes.contains(out.row) || !axes.contains(out.col) || out.row == out.col)
        fail(at, "spd needs a parameter with exactly the two axes row and col, got " + axes.describe());
      if (axes.size_of(out.row) != axes.size_of(out.col))
        fail(at, "spd needs a square matrix, got " + axes.describe());
      return out;
    }
    fail(at, "unknown constraint '" + type + "' (expected unconstrained, positive, interval or spd)");
  }

  // The unconstrained coordinates from an init rule, of `dtype` (complex: each part drawn by the
  // random rules; "value" may be a complex number).
  Tensor init_rule(const json& r, const std::string& at, const Axes& axes, DType dtype) {
    if (!r.is_object()) fail(at, "expected an init rule object, got " + brief(r));
    only_keys(r, at, {"rule", "seed", "mean", "scale", "lower", "upper", "value"});
    const std::string rule = string_at(need(r, "rule", at, "normal | uniform | constant | identity"), at + "/rule", "a rule");
    auto number = [&](const char* key, double fallback) {
      if (!r.contains(key)) return fallback;
      if (!r[key].is_number()) fail(at + "/" + key, "expected a number, got " + brief(r[key]));
      return r[key].get<double>();
    };
    auto seed = [&]() -> uint64_t {
      const json& s = need(r, "seed", at, "an integer seed, so that loading twice gives the same values");
      if (!s.is_number_unsigned()) fail(at + "/seed", "expected a non-negative integer, got " + brief(s));
      return s.get<uint64_t>();
    };
    const DType draw = is_complex(dtype) ? DType::c128 : DType::f64;
    Tensor t;
    if (rule == "normal") {
      t = number("mean", 0.0) + number("scale", 1.0) * randn(axes, seed(), draw);
    } else if (rule == "uniform") {
      const double lo = number("lower", 0.0), hi = number("upper", 1.0);
      if (!(lo < hi)) fail(at, "uniform needs lower < upper");
      t = uniform(axes, seed(), lo, hi, draw);
    } else if (rule == "constant") {
      t = r.contains("value") && r["value"].is_object() ? values_from_json(r["value"], axes, draw, at + "/value")
                                                         : full(axes, number("value", 0.0), draw);
    } else if (rule == "identity") {
      if (axes.rank() != 2 || axes.size(0) != axes.size(1)) fail(at, "identity needs two axes of one size, got " + axes.describe());
      std::vector<double> v(size_t(axes.numel()), 0.0);
      for (int64_t k = 0; k < axes.size(0); ++k) v[size_t(k * axes.size(0) + k)] = 1.0;
      t = astype(tensor(v, axes), draw);
    } else {
      fail(at + "/rule", "unknown rule '" + rule + "' (expected normal, uniform, constant or identity)");
    }
    return t.dtype() == dtype ? contiguous(t) : astype(t, dtype);
  }

  // The axis split across the ranks of the communicator the model is loaded with: this rank's block.
  void sharded(const json& v) {
    const std::string name = string_at(v, "/sharded", "the name of a declared axis");
    if (!d_.axes.contains(Name(name))) fail("/sharded", "'" + name + "' is not a declared axis " + d_.axes.describe());
    const int64_t global = d_.axes.size_of(Name(name));
    Block b;
    try {
      b = d_.comm.block(global);
    } catch (const Error& e) {
      fail("/sharded", e.what());
    }
    d_.sharded = Name(name);
    d_.shard = detail::intern_sharding({Name(name), global, b, d_.comm});
  }

  // An input's data from the file: this rank's block where it has the sharded axis (read alone
  // from a CSV file whose values have that axis outermost; otherwise read whole and sliced).
  Tensor input_data(const json& spec, const InputDecl& in, const std::string& at, bool missing) {
    const bool sharded = d_.sharded && in.axes.contains(*d_.sharded);
    const detail::Sharding* s = sharded ? &detail::sharding_of(d_.shard) : nullptr;
    Tensor data;
    if (spec.contains("csv") && sharded && in.axes.index_of(s->axis) == 0) {
      Axes block = in.axes;
      block.set_size(0, s->block.size);
      const int64_t inner = in.axes.numel() / s->global;
      return detail::with_shard(values_from_csv_block(in.file, block, in.dtype, at + "/csv", missing,
                                                      s->block.offset * inner, in.axes.numel()),
                                d_.shard);
    }
    if (spec.contains("value"))
      data = values_from_json(spec["value"], in.axes, in.dtype, at + "/value", missing);
    else if (spec.contains("csv"))
      data = values_from_csv(in.file, in.axes, in.dtype, at + "/csv", missing);
    else
      data = values_from_json_file(in.file, in.axes, in.dtype, at + "/json", missing);
    if (!sharded) return data;
    return detail::with_shard(contiguous(slice(data, s->axis, s->block.offset, s->block.offset + s->block.size)),
                              d_.shard);
  }

  // "complex": true makes a parameter or input complex (complex128 in a float64 model, complex64 in
  // a float32 one).
  static bool complex_flag(const json& spec, const std::string& at) {
    if (!spec.contains("complex")) return false;
    if (!spec["complex"].is_boolean()) fail(at + "/complex", "expected true or false, got " + brief(spec["complex"]));
    return spec["complex"].get<bool>();
  }

  void parameters(const json& ps, Scope& top) {
    if (!ps.is_object()) fail("/parameters", "expected an object of parameters, got " + brief(ps));
    for (const auto& [name, p] : ps.items()) {
      const std::string at = pointer_join("/parameters", name);
      if (!p.is_object()) fail(at, "expected a parameter object, got " + brief(p));
      only_keys(p, at, {"axes", "value", "unconstrained", "init", "trainable", "constraint", "complex", "description"});
      Parameter par;
      const DType dtype = complex_flag(p, at) ? complex_dtype(d_.dtype) : d_.dtype;
      par.name = name;
      par.pointer = at;
      par.axes = axes_of(p.contains("axes") ? p["axes"] : json::array(), at + "/axes");
      if (d_.sharded && par.axes.contains(*d_.sharded))
        fail(at + "/axes", "a parameter cannot have the sharded axis '" + d_.sharded->str() +
                               "': parameters are whole on every rank (give per-" + d_.sharded->str() +
                               " values as an input)");
      if (p.contains("trainable")) {
        if (!p["trainable"].is_boolean()) fail(at + "/trainable", "expected true or false, got " + brief(p["trainable"]));
        par.trainable = p["trainable"].get<bool>();
      }
      if (p.contains("constraint")) par.constraint = constraint(p["constraint"], at + "/constraint", par.axes);
      if (is_complex(dtype) && par.constraint.kind != ConstraintKind::none)
        fail(at + "/constraint", "a complex parameter takes no constraint (its coordinates are its real and imaginary parts)");
      const int given = int(p.contains("value")) + int(p.contains("init"));
      if (given != 1 && !p.contains("unconstrained"))
        fail(at, "give exactly one of \"value\" (the constrained value) or \"init\" (a rule for the unconstrained coordinates)");
      if (p.contains("init") && (p.contains("value") || p.contains("unconstrained")))
        fail(at, "\"init\" cannot be combined with \"value\" or \"unconstrained\"");
      if (p.contains("unconstrained")) {
        par.u = values_from_json(p["unconstrained"], par.axes, dtype, at + "/unconstrained");
        if (p.contains("value")) {
          // A saved model carries both; an edited value must not be silently overridden.
          Tensor v = values_from_json(p["value"], par.axes, dtype, at + "/value");
          const std::vector<std::complex<double>> a = v.to_complex_vector(par.axes.names());
          const std::vector<std::complex<double>> b = constrain(par.constraint, par.u).to_complex_vector(par.axes.names());
          for (size_t k = 0; k < a.size(); ++k)
            if (std::abs(a[k] - b[k]) > 1e-9 * (1.0 + std::abs(a[k])))
              fail(at, "\"value\" and \"unconstrained\" disagree (element " + std::to_string(k) +
                           "); edit one of them and delete the other");
        }
      } else if (p.contains("value")) {
        Tensor v = values_from_json(p["value"], par.axes, dtype, at + "/value");
        par.u = unconstrain(par.constraint, v, at + "/value");
      } else {
        par.u = init_rule(p["init"], at + "/init", par.axes, dtype);
      }
      par.u = contiguous(transpose(par.u, par.axes.names()));  // stored in the declared order
      const int slot = d_.slots++;
      define(top, name, slot, at);
      d_.graph.params.push_back(slot);
      d_.params.push_back(std::move(par));
    }
  }

  void inputs(const json& is, Scope& top) {
    if (!is.is_object()) fail("/inputs", "expected an object of inputs, got " + brief(is));
    for (const auto& [name, spec] : is.items()) {
      const std::string at = pointer_join("/inputs", name);
      if (!spec.is_object()) fail(at, "expected an input object, got " + brief(spec));
      only_keys(spec, at, {"axes", "value", "csv", "json", "missing", "complex", "description"});
      InputDecl in;
      in.name = name;
      in.pointer = at;
      in.dtype = complex_flag(spec, at) ? complex_dtype(d_.dtype) : d_.dtype;
      in.axes = axes_of(spec.contains("axes") ? spec["axes"] : json::array(), at + "/axes");
      if (int(spec.contains("value")) + int(spec.contains("csv")) + int(spec.contains("json")) > 1)
        fail(at, "give at most one of \"value\", \"csv\" and \"json\"");
      if (spec.contains("missing") && !spec["missing"].is_boolean())
        fail(at + "/missing", "expected true or false, got " + brief(spec["missing"]));
      const bool missing = spec.value("missing", false);
      if (spec.contains("csv") || spec.contains("json")) {
        const std::string key = spec.contains("csv") ? "csv" : "json";
        const std::string rel = string_at(spec[key], at + "/" + key, "a file path relative to the model file");
        in.file = std::filesystem::absolute(d_.base_dir / rel).lexically_normal();
      }
      if (spec.contains("value") || !in.file.empty()) in.data = input_data(spec, in, at, missing);
      const int slot = d_.slots++;
      define(top, name, slot, at);
      d_.graph.params.push_back(slot);
      d_.inputs.push_back(std::move(in));
    }
  }

  // ---- graphs ----

  struct Raw {
    const json* j;
    std::string at;
    std::vector<std::string> defines;
    std::set<std::string> reads;  // names read from this scope or outer ones
  };

  static std::vector<Ref> refs(const json& list, const std::string& at, const char* what) {
    if (!list.is_array()) fail(at, std::string("expected a list of ") + what + ", got " + brief(list));
    std::vector<Ref> out;
    for (std::size_t k = 0; k < list.size(); ++k) {
      Ref r;
      r.pointer = pointer_join(at, k);
      if (list[k].is_number()) {
        r.literal = true;
        r.number = list[k].get<double>();
      } else if (list[k].is_string()) {
        r.name = list[k].get<std::string>();
      } else if (list[k].is_object() && (list[k].contains("re") || list[k].contains("im"))) {
        const Tensor z = values_from_json(list[k], Axes{}, DType::c128, r.pointer);
        r.literal = r.complex = true;
        r.number = z.item_complex().real();
        r.imag = z.item_complex().imag();
      } else {
        fail(r.pointer, "expected a name (string), a number or a complex number {\"re\": x, \"im\": y}, got " +
                            brief(list[k]));
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  static std::vector<std::string> names(const json& list, const std::string& at, const char* what) {
    if (!list.is_array()) fail(at, std::string("expected a list of ") + what + ", got " + brief(list));
    std::vector<std::string> out;
    for (std::size_t k = 0; k < list.size(); ++k) out.push_back(string_at(list[k], pointer_join(at, k), what));
    return out;
  }

  static bool control(const std::string& op) { return op == "scan" || op == "nmap" || op == "map"; }

  // Names a body reads from outside itself (its own parameters and nodes excluded).
  static void body_reads(const json& body, const std::string& op, std::set<std::string>& reads) {
    if (!body.is_object()) return;  // reported when the body is built
    std::set<std::string> local;
    for (const char* key : {"carry", "x", "args"})
      if (body.contains(key) && body[key].is_array())
        for (const json& n : body[key])
          if (n.is_string()) local.insert(n.get<std::string>());
    std::set<std::string> inner;
    if (body.contains("graph") && body["graph"].is_array())
      for (const json& node : body["graph"]) node_reads(node, local, inner);
    for (const char* key : op == "scan" ? std::vector<const char*>{"carry_out", "ys"} : std::vector<const char*>{"results"})
      if (body.contains(key) && body[key].is_array())
        for (const json& n : body[key])
          if (n.is_string()) inner.insert(n.get<std::string>());
    for (const std::string& n : inner)
      if (!local.count(n)) reads.insert(n);
  }

  // Adds the names `node` defines to `defined` and the names it reads to `reads`.
  static void node_reads(const json& node, std::set<std::string>& defined, std::set<std::string>& reads) {
    if (!node.is_object()) return;
    if (node.contains("name") && node["name"].is_string()) defined.insert(node["name"].get<std::string>());
    if (node.contains("outputs") && node["outputs"].is_array())
      for (const json& n : node["outputs"])
        if (n.is_string()) defined.insert(n.get<std::string>());
    for (const char* key : {"inputs", "init", "xs"})
      if (node.contains(key) && node[key].is_array())
        for (const json& n : node[key])
          if (n.is_string()) reads.insert(n.get<std::string>());
    const std::string op = node.contains("op") && node["op"].is_string() ? node["op"].get<std::string>() : "";
    if (node.contains("body")) body_reads(node["body"], op, reads);
  }

  void graph(const json& nodes, const std::string& at, Scope& scope, Graph& g) {
    if (!nodes.is_array()) fail(at, "expected a list of nodes, got " + brief(nodes));
    std::vector<Raw> raw;
    std::map<std::string, int> producer;  // name -> index of the node defining it in this graph
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      Raw r{&nodes[k], pointer_join(at, k), {}, {}};
      const json& n = nodes[k];
      if (!n.is_object()) fail(r.at, "expected a node object, got " + brief(n));
      const std::string op = string_at(need(n, "op", r.at, "the op's name"), r.at + "/op", "an op name");
      if (control(op)) {
        r.defines = names(need(n, "outputs", r.at, "the names of the results"), r.at + "/outputs", "a name");
      } else {
        r.defines.push_back(string_at(need(n, "name", r.at, "the name of the result"), r.at + "/name", "a name"));
      }
      std::set<std::string> ignored;
      node_reads(n, ignored, r.reads);
      for (std::size_t q = 0; q < r.defines.size(); ++q) {
        const std::string& name = r.defines[q];
        const std::string where = control(op) ? pointer_join(r.at + "/outputs", q) : r.at + "/name";
        if (const auto* prev = scope.find(name)) fail(where, "the name '" + name + "' is already defined at " + prev->second);
        if (producer.count(name) && producer[name] == int(k))
          fail(where, "the name '" + name + "' is listed twice in this node's outputs");
        if (producer.count(name))
          fail(where, "the name '" + name + "' is already defined at " + raw[size_t(producer[name])].at);
        producer[name] = int(k);
      }
      raw.push_back(std::move(r));
    }
    // Depth-first order: every node after the nodes it reads; a node met again while open is a cycle.
    std::vector<int> state(raw.size(), 0), order;
    std::vector<int> stack;
    auto visit = [&](auto&& self, int k) -> void {
      if (state[size_t(k)] == 2) return;
      if (state[size_t(k)] == 1) {
        std::string path;
        bool on = false;
        for (int s : stack) {
          on = on || s == k;
          if (on) path += raw[size_t(s)].defines.at(0) + " -> ";
        }
        fail(raw[size_t(k)].at, "the graph has a cycle (each name is computed from the next): " + path +
                                    raw[size_t(k)].defines.at(0));
      }
      state[size_t(k)] = 1;
      stack.push_back(k);
      for (const std::string& n : raw[size_t(k)].reads) {
        auto it = producer.find(n);
        if (it != producer.end()) self(self, it->second);
      }
      stack.pop_back();
      state[size_t(k)] = 2;
      order.push_back(k);
    };
    for (int k = 0; k < int(raw.size()); ++k) visit(visit, k);
    for (int k : order) g.nodes.push_back(node(*raw[size_t(k)].j, raw[size_t(k)].at, scope));
  }

  int resolve(const Ref& r, const Scope& scope) {
    if (r.literal) {
      const int slot = d_.slots++;
      Tensor c = r.complex ? scalar(std::complex<double>(r.number, r.imag), complex_dtype(d_.dtype))
                           : scalar(r.number, d_.dtype);
      d_.constants.emplace_back(slot, c);
      return slot;
    }
    const auto* found = scope.find(r.name);
    if (!found) fail(r.pointer, "unknown name '" + r.name + "'" + known(scope));
    return found->first;
  }

  std::vector<int> resolve_all(const json& list, const std::string& at, const char* what, const Scope& scope) {
    std::vector<int> out;
    for (const Ref& r : refs(list, at, what)) out.push_back(resolve(r, scope));
    return out;
  }

  AxisList over_axes(const json& n, const std::string& at, bool single) {
    const json& o = need(n, "over", at, single ? "the axis to run along" : "the axes to map over");
    AxisList out;
    if (o.is_string()) {
      out.push_back(Name(o.get<std::string>()));
    } else if (!single && o.is_array()) {
      for (const std::string& s : names(o, at + "/over", "an axis name")) out.push_back(Name(s));
    } else {
      fail(at + "/over", std::string("expected ") + (single ? "an axis name" : "an axis name or a list of them") +
                             ", got " + brief(o));
    }
    for (Name a : out)
      if (!d_.axes.contains(a)) fail(at + "/over", "unknown axis '" + a.str() + "'; the model declares " + d_.axes.describe());
    return out;
  }

  int64_t integer(const json& n, const char* key, const std::string& at, int64_t fallback, int64_t lowest) {
    if (!n.contains(key)) return fallback;
    const json& v = n[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lowest)
      fail(at + "/" + key, "expected an integer >= " + std::to_string(lowest) + ", got " + brief(v));
    return v.get<int64_t>();
  }

  bool boolean(const json& n, const char* key, const std::string& at, bool fallback) {
    if (!n.contains(key)) return fallback;
    if (!n[key].is_boolean()) fail(at + "/" + key, "expected true or false, got " + brief(n[key]));
    return n[key].get<bool>();
  }

  // A body: its parameters are bound by the caller; it reads outer names through `outer`.
  std::unique_ptr<Graph> body(const json& b, const std::string& at, const Scope& outer, const std::string& op,
                              size_t n_args, size_t n_xs, size_t n_outputs) {
    if (!b.is_object()) fail(at, "expected a body object, got " + brief(b));
    if (body_depth_ >= kMaxBodyDepth)
      fail(at, "bodies nested deeper than " + std::to_string(kMaxBodyDepth) + " levels (the most a model may have)");
    struct Deeper {
      int& depth;
      explicit Deeper(int& d) : depth(++d) {}
      ~Deeper() { --depth; }
    } deeper(body_depth_);
    auto g = std::make_unique<Graph>();
    Scope scope;
    scope.outer = &outer;
    auto bind_params = [&](const char* key, size_t count, const char* what) {
      const std::vector<std::string> ps = names(need(b, key, at, what), at + "/" + key, "a name");
      if (ps.size() != count)
        fail(at + "/" + key, "expected " + std::to_string(count) + " names (" + what + "), got " + std::to_string(ps.size()));
      for (size_t k = 0; k < ps.size(); ++k) {
        const int slot = d_.slots++;
        define(scope, ps[k], slot, pointer_join(at + "/" + key, k));
        g->params.push_back(slot);
      }
    };
    if (op == "scan") {
      only_keys(b, at, {"carry", "x", "graph", "carry_out", "ys"});
      bind_params("carry", n_args, "one per init value");
      bind_params("x", n_xs, "one per scanned input in xs");
    } else {
      only_keys(b, at, {"args", "graph", "results"});
      bind_params("args", n_args, "one per input");
    }
    const json empty = json::array();
    graph(b.contains("graph") ? b["graph"] : empty, at + "/graph", scope, *g);
    if (op == "scan") {
      const json& co = need(b, "carry_out", at, "the names of the next carry");
      g->results = resolve_all(co, at + "/carry_out", "names", scope);
      if (g->results.size() != n_args)
        fail(at + "/carry_out", "expected " + std::to_string(n_args) + " names (one per carry), got " +
                                    std::to_string(g->results.size()));
      const json& ys = b.contains("ys") ? b["ys"] : empty;
      for (int s : resolve_all(ys, at + "/ys", "names", scope)) g->results.push_back(s);
    } else {
      g->results = resolve_all(need(b, "results", at, "the names of the results"), at + "/results", "names", scope);
    }
    g->captures = outer_reads(*g);
    if (g->results.size() != n_outputs)
      fail(at, "the body returns " + std::to_string(g->results.size()) + " values but the node names " +
                   std::to_string(n_outputs) + " outputs");
    return g;
  }


  Node node(const json& n, const std::string& at, Scope& scope) {
    Node out;
    out.pointer = at;
    out.label = n["op"].get<std::string>();
    const std::string& op = out.label;
    if (op == "scan") {
      only_keys(n, at,
                {"op", "outputs", "over", "init", "xs", "body", "reverse", "checkpoint_every",
                 "memory_budget", "residual_budget", "length", "description"});
      out.kind = NodeKind::scan;
      out.scan_cache = std::make_shared<detail::ScanCache>();
      out.over = over_axes(n, at, true);
      out.init = resolve_all(need(n, "init", at, "the initial carry"), at + "/init", "names or numbers", scope);
      const json empty = json::array();
      out.xs = resolve_all(n.contains("xs") ? n["xs"] : empty, at + "/xs", "names", scope);
      out.scan_options.reverse = boolean(n, "reverse", at, false);
      out.scan_options.checkpoint_every = integer(n, "checkpoint_every", at, 1, 1);
      out.scan_options.memory_budget = integer(n, "memory_budget", at, 0, 0);
      out.scan_options.residual_budget = integer(n, "residual_budget", at, ScanOptions{}.residual_budget, 0);
      out.scan_options.length = integer(n, "length", at, -1, 0);
      const size_t n_out = n["outputs"].size();
      if (n_out < out.init.size())
        fail(at + "/outputs", "a scan names its final carries (" + std::to_string(out.init.size()) +
                                  ") and then its stacked ys; got " + std::to_string(n_out) + " names");
      out.body = body(need(n, "body", at, "the step"), at + "/body", scope, op, out.init.size(), out.xs.size(), n_out);
    } else if (op == "nmap" || op == "map") {
      if (op == "nmap") {
        only_keys(n, at, {"op", "outputs", "over", "inputs", "body", "description"});
        out.kind = NodeKind::nmap;
      } else {
        only_keys(n, at, {"op", "outputs", "over", "inputs", "body", "batch_size", "memory_budget", "rematerialize",
                          "parallel_chunks", "description"});
        out.kind = NodeKind::map;
        out.map_options.batch_size = integer(n, "batch_size", at, 0, 0);
        out.map_options.memory_budget = integer(n, "memory_budget", at, 0, 0);
        out.map_options.parallel_chunks = integer(n, "parallel_chunks", at, 1, 1);
        out.map_options.rematerialize = boolean(n, "rematerialize", at, true);
      }
      out.over = over_axes(n, at, op == "map");
      out.inputs = resolve_all(need(n, "inputs", at, "the mapped arguments"), at + "/inputs", "names or numbers", scope);
      out.body = body(need(n, "body", at, "the mapped function"), at + "/body", scope, op, out.inputs.size(), 0,
                      n["outputs"].size());
    } else {
      only_keys(n, at, {"op", "name", "inputs", "attrs", "description"});
      out.op = find_op(op.c_str());
      if (!out.op) fail(at + "/op", "unknown op '" + op + "' (any registered op, or scan, nmap, map)");
      const json empty = json::array();
      out.inputs = resolve_all(n.contains("inputs") ? n["inputs"] : empty, at + "/inputs", "names or numbers", scope);
      if (out.op->arity >= 0 && int(out.inputs.size()) != out.op->arity)
        fail(at + "/inputs", "op '" + op + "' takes " + std::to_string(out.op->arity) + " inputs, got " +
                                 std::to_string(out.inputs.size()));
      if (out.op->arity < 0 && out.inputs.empty()) fail(at + "/inputs", "op '" + op + "' needs at least one input");
      ParsedAttrs pa = parse_attrs(*out.op, n.contains("attrs") ? &n["attrs"] : nullptr, at + "/attrs", d_.axes);
      out.attrs = pa.attrs;
      out.all_axes = pa.all_axes;
      out.sized = pa.sized;
    }
    // Outputs get their slots only now, so nothing in this node can read them.
    if (out.kind == NodeKind::op) {
      const int slot = d_.slots++;
      define(scope, n["name"].get<std::string>(), slot, at + "/name");
      out.outputs.push_back(slot);
    } else {
      for (size_t k = 0; k < n["outputs"].size(); ++k) {
        const int slot = d_.slots++;
        define(scope, n["outputs"][k].get<std::string>(), slot, pointer_join(at + "/outputs", k));
        out.outputs.push_back(slot);
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Definition> parse(const json& doc, const std::filesystem::path& base_dir, const Communicator& comm) {
  auto d = std::make_unique<Definition>();
  d->doc = doc;
  d->base_dir = base_dir;
  d->comm = comm;
  Parser(*d).document(doc);
  for (const auto& [name, slot] : d->outputs) d->output_graphs.push_back(pruned(d->graph, {slot}));
  return d;
}

}  // namespace tenax::model_detail
