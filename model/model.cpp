// The Model class: loading (with one validating run), running, gradients, parameter access, saving.
#include "tenax/model/model.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tenax/autodiff/grad.h"
#include "tenax/core/creation.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/transfer.h"
#include "tenax/model/definition.h"
#include "tenax/model/json_input.h"
#include "tenax/model/values.h"

namespace tenax {

using model_detail::Definition;
using model_detail::json;

namespace {

const model_detail::Parameter& find_param(const Definition& d, const std::string& name, size_t* index = nullptr) {
  for (size_t k = 0; k < d.params.size(); ++k)
    if (d.params[k].name == name) {
      if (index) *index = k;
      return d.params[k];
    }
  std::string list;
  for (const auto& p : d.params) list += (list.empty() ? "" : ", ") + p.name;
  throw ModelError("/parameters: no parameter named '" + name + "' (parameters: " + list + ")");
}

// The output's index in d.outputs.
size_t output_index(const Definition& d, const std::string& name) {
  for (size_t k = 0; k < d.outputs.size(); ++k)
    if (d.outputs[k].first == name) return k;
  std::string list;
  for (const auto& [n, slot] : d.outputs) list += (list.empty() ? "" : ", ") + n;
  throw ModelError("/outputs: no output named '" + name + "' (outputs: " + list + ")");
}

// `axes` with the sharded axis at this rank's block size.
Axes local_axes(const Definition& d, Axes axes) {
  if (d.shard == 0) return axes;
  const detail::Sharding& s = detail::sharding_of(d.shard);
  const int i = axes.index_of(s.axis);
  if (i >= 0) axes.set_size(i, s.block.size);
  return axes;
}

// An input with the sharded axis: this rank's block, sharded as the model shards it (a whole
// tensor is taken as it is by a model on one rank).
Tensor on_this_rank(const Definition& d, const model_detail::InputDecl& decl, const Tensor& t) {
  if (d.shard == 0 || !decl.axes.contains(*d.sharded)) return t;
  if (t.shard_id() == d.shard) return t;
  const detail::Sharding& s = detail::sharding_of(d.shard);
  if (t.shard_id() == 0 && s.comm.size() == 1) return detail::with_shard(t, d.shard);
  throw ModelError(decl.pointer + ": input '" + decl.name + "' has the axis '" + s.axis.str() + "' the model shards over " +
                   std::to_string(s.comm.size()) + " ranks: pass this rank's block " + std::to_string(s.block.offset) +
                   ".." + std::to_string(s.block.offset + s.block.size) + " of " + std::to_string(s.global) +
                   ", sharded (tenax::shard(block, \"" + s.axis.str() + "\", model.communicator()))");
}

// Checks run() inputs against the declarations: known name, declared axes (any order), dtype.
std::vector<std::pair<std::string, Tensor>> checked_inputs(const Definition& d, const TensorMap& inputs) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : inputs) {
    const model_detail::InputDecl* decl = nullptr;
    for (const auto& in : d.inputs)
      if (in.name == name) decl = &in;
    if (!decl) {
      std::string list;
      for (const auto& in : d.inputs) list += (list.empty() ? "" : ", ") + in.name;
      throw ModelError("/inputs: the model has no input named '" + name + "' (inputs: " + list + ")");
    }
    if (!t.defined()) throw ModelError(decl->pointer + ": the tensor passed for '" + name + "' is undefined");
    const Tensor v = on_this_rank(d, *decl, t);
    if (!v.axes().same_set(local_axes(d, decl->axes)))
      throw ModelError(decl->pointer + ": input '" + name + "' is declared with axes " + decl->axes.describe() +
                       ", got " + t.axes().describe());
    if (t.dtype() != decl->dtype)
      throw ModelError(decl->pointer + ": input '" + name + "' must be " + dtype_name(decl->dtype) + " as declared, got " +
                       dtype_name(t.dtype()) + " (convert it with astype)");
    if (!(t.device() == d.device))
      throw ModelError(decl->pointer + ": input '" + name + "' is on " + t.device().str() +
                       " but the model runs on " + d.device.str() +
                       " (move it with to(tensor, model.device()))");
    out.emplace_back(name, v);
  }
  return out;
}

// Runs f on every rank of a sharded model's communicator with failure agreement (an Error on one
// rank raises on all); directly otherwise.
template <class F>
auto collective(const Definition& d, F&& f) {
  return d.shard != 0 ? d.comm.run(std::forward<F>(f)) : f();
}

// The unconstrained parameters on the model's device (they are kept on the host).
std::vector<Tensor> all_u(const Definition& d) {
  std::vector<Tensor> u;
  for (const auto& p : d.params) u.push_back(to(p.u, d.device));
  return u;
}

void check_like(const model_detail::Parameter& p, const Tensor& v) {
  const DType dtype = p.u.dtype();
  if (!v.defined() || !v.axes().same_set(p.axes))
    throw ModelError(p.pointer + ": parameter '" + p.name + "' has axes " + p.axes.describe() + ", got " +
                     (v.defined() ? v.axes().describe() : std::string("an undefined tensor")));
  if (v.dtype() != dtype)
    throw ModelError(p.pointer + ": parameter '" + p.name + "' is " + dtype_name(dtype) + ", got " + dtype_name(v.dtype()));
}

// The value table after one run of `graph` (the whole graph or an output's part).
std::vector<Tensor> evaluated(const Definition& d, const model_detail::Graph& graph, const std::vector<Tensor>& u,
                              const std::vector<std::pair<std::string, Tensor>>& inputs) {
  std::vector<Tensor> env = model_detail::bind(d, u, inputs);
  model_detail::evaluate(graph, env);
  return env;
}

// A copy detached from the caller's buffer and tape, in the declared axis order.
Tensor owned(const Tensor& v, const Axes& axes) { return contiguous(transpose(v, axes.names())); }

}  // namespace

Model::Model(std::unique_ptr<Definition> def) : def_(std::move(def)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;
Model::Model(const Model& o) : def_(nullptr) {
  // The graph is immutable after loading; a copy re-parses the document and takes the parameters.
  def_ = model_detail::parse(o.def_->doc, o.def_->base_dir, o.def_->comm);
  for (size_t k = 0; k < def_->params.size(); ++k) def_->params[k].u = o.def_->params[k].u;
  def_->device = o.def_->device;
  def_->device_constants = o.def_->device_constants;
  def_->device_data = o.def_->device_data;
}
Model& Model::operator=(const Model& o) {
  if (this != &o) *this = Model(o);
  return *this;
}

TensorMap Model::run(const TensorMap& inputs) const {
  return collective(*def_, [&] {
    const std::vector<Tensor> env = evaluated(*def_, def_->graph, all_u(*def_), checked_inputs(*def_, inputs));
    TensorMap out;
    for (const auto& [name, slot] : def_->outputs) out[name] = env[size_t(slot)];
    return out;
  });
}

Tensor Model::run(const std::string& output, const TensorMap& inputs) const {
  return collective(*def_, [&] {
    const size_t k = output_index(*def_, output);
    const auto env = evaluated(*def_, def_->output_graphs[k], all_u(*def_), checked_inputs(*def_, inputs));
    return env[size_t(def_->outputs[k].second)];
  });
}

ModelGradient Model::value_and_grad(const std::string& output, const TensorMap& inputs) const {
  return collective(*def_, [&] { return value_and_grad_here(output, inputs); });
}

ModelGradient Model::value_and_grad_here(const std::string& output, const TensorMap& inputs) const {
  const size_t index = output_index(*def_, output);
  const int slot = def_->outputs[index].second;
  const model_detail::Graph& graph = def_->output_graphs[index];
  const auto in = checked_inputs(*def_, inputs);
  std::vector<size_t> train;
  std::vector<Tensor> args;
  for (size_t k = 0; k < def_->params.size(); ++k)
    if (def_->params[k].trainable) {
      train.push_back(k);
      args.push_back(to(def_->params[k].u, def_->device));
    }
  if (train.empty()) throw ModelError("/parameters: the model has no trainable parameter to differentiate");
  auto f = [&](const std::vector<Tensor>& a) {
    std::vector<Tensor> u = all_u(*def_);
    for (size_t q = 0; q < train.size(); ++q) u[train[q]] = a[q];
    const Tensor v = evaluated(*def_, graph, u, in)[size_t(slot)];
    if (v.rank() != 0)
      throw ModelError("/outputs/" + output + ": value_and_grad needs a scalar output, '" + output + "' has axes " +
                       v.axes().describe());
    return v;
  };
  auto [value, grads] = tenax::value_and_grad(f, args);
  for (size_t q = 0; q < grads.size(); ++q)
    if (!grads[q].defined()) grads[q] = zeros(def_->params[train[q]].u.axes(), def_->params[train[q]].u.dtype(), def_->device);
  return {value, grads};
}

void Model::set_device(Device device) {
  detail::require_device(device, "Model::set_device");  // before anything changes
  std::vector<Tensor> constants, data;
  if (!(device == Device::cpu())) {
    // Every copy is made before anything changes: a failed transfer leaves the model as it was.
    for (const auto& [slot, c] : def_->constants) constants.push_back(to(c, device));
    for (const auto& in : def_->inputs) data.push_back(in.data.defined() ? to(in.data, device) : Tensor());
  }
  def_->device = device;
  def_->device_constants = std::move(constants);
  def_->device_data = std::move(data);
}
Device Model::device() const { return def_->device; }

std::vector<std::string> Model::parameters() const {
  std::vector<std::string> out;
  for (const auto& p : def_->params) out.push_back(p.name);
  return out;
}
std::vector<std::string> Model::trainable() const {
  std::vector<std::string> out;
  for (const auto& p : def_->params)
    if (p.trainable) out.push_back(p.name);
  return out;
}
std::vector<std::string> Model::outputs() const {
  std::vector<std::string> out;
  for (const auto& [n, slot] : def_->outputs) out.push_back(n);
  return out;
}
const Communicator& Model::communicator() const { return def_->comm; }
std::optional<Name> Model::sharded_axis() const { return def_->sharded; }

std::vector<std::string> Model::inputs() const {
  std::vector<std::string> out;
  for (const auto& in : def_->inputs) out.push_back(in.name);
  return out;
}
const ModelAxes& Model::axes() const { return def_->axes; }

Tensor Model::input(const std::string& name) const {
  for (const auto& in : def_->inputs)
    if (in.name == name) return in.data;
  throw ModelError("/inputs: no input '" + name + "'");
}

Tensor Model::parameter(const std::string& name) const {
  const auto& p = find_param(*def_, name);
  return model_detail::constrain(p.constraint, p.u);
}
void Model::set_parameter(const std::string& name, const Tensor& value) {
  size_t k = 0;
  const auto& p = find_param(*def_, name, &k);
  check_like(p, value);
  Tensor u = model_detail::unconstrain(p.constraint, owned(value, p.axes), p.pointer);
  def_->params[k].u = owned(u, p.axes);
}
Tensor Model::unconstrained(const std::string& name) const { return find_param(*def_, name).u; }
std::string Model::constraint(const std::string& name) const {
  return model_detail::describe(find_param(*def_, name).constraint);
}
void Model::set_unconstrained(const std::string& name, const Tensor& value) {
  size_t k = 0;
  const auto& p = find_param(*def_, name, &k);
  check_like(p, value);
  Tensor u = owned(value, p.axes);
  const std::vector<double> v = model_detail::real_coordinates(u);
  for (double x : v)
    if (!std::isfinite(x)) throw ModelError(p.pointer + ": the unconstrained value of '" + name + "' holds a non-finite number");
  model_detail::check_representable(p.constraint, v, real_dtype(p.u.dtype()), p.pointer);
  def_->params[k].u = u;
}

std::vector<double> Model::unconstrained_vector() const {
  std::vector<double> out;
  for (const auto& p : def_->params)
    if (p.trainable) {
      const std::vector<double> v = model_detail::real_coordinates(transpose(p.u, p.axes.names()));
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}
void Model::set_unconstrained_vector(std::span<const double> values) {
  // A complex parameter's element takes two coordinates: its real and imaginary parts.
  auto count = [](const model_detail::Parameter& p) { return size_t(p.axes.numel()) * (is_complex(p.u.dtype()) ? 2 : 1); };
  size_t need = 0;
  for (const auto& p : def_->params)
    if (p.trainable) need += count(p);
  if (values.size() != need)
    throw ModelError("/parameters: expected " + std::to_string(need) + " unconstrained values (the trainable parameters), got " +
                     std::to_string(values.size()));
  for (double x : values)
    if (!std::isfinite(x)) throw ModelError("/parameters: set_unconstrained_vector got a non-finite value");
  size_t at = 0;
  for (const auto& p : def_->params)  // every value checked before any changes
    if (p.trainable) {
      const size_t n = count(p);
      model_detail::check_representable(p.constraint, std::vector<double>(values.begin() + long(at), values.begin() + long(at + n)),
                                        real_dtype(p.u.dtype()), p.pointer);
      at += n;
    }
  at = 0;
  for (auto& p : def_->params)
    if (p.trainable) {
      const size_t n = count(p);
      p.u = model_detail::from_real_coordinates(values.subspan(at, n), p.axes, p.u.dtype());
      at += n;
    }
}
std::vector<double> Model::flatten(const std::vector<Tensor>& grads) {
  std::vector<double> out;
  for (const Tensor& g : grads) {
    // Row-major in the parameter's declared order, which value_and_grad keeps (grads have u's axes);
    // a complex gradient as (real, imaginary) pairs, the coordinates of unconstrained_vector().
    const std::vector<double> v = model_detail::real_coordinates(to(g, Device::cpu()));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

json Model::to_json(const std::filesystem::path& directory) const {
  json doc = def_->doc;
  for (const auto& p : def_->params) {
    json& spec = doc["parameters"][p.name];
    spec.erase("init");
    spec["value"] = model_detail::values_to_json(
        transpose(model_detail::constrain(p.constraint, p.u), p.axes.names()));
    spec["unconstrained"] = model_detail::values_to_json(transpose(p.u, p.axes.names()));
  }
  for (const auto& in : def_->inputs)
    if (!in.file.empty()) {
      json& spec = doc["inputs"][in.name];
      const char* key = spec.contains("csv") ? "csv" : "json";
      spec[key] = std::filesystem::absolute(in.file).lexically_relative(std::filesystem::absolute(directory)).generic_string();
    }
  return doc;
}

void Model::save(const std::filesystem::path& path) const {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::string text = to_json(dir).dump(2) + "\n";
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ModelError("/: cannot write '" + tmp.string() + "'");
    out << text;
    out.flush();
    if (!out) throw ModelError("/: writing '" + tmp.string() + "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw ModelError("/: cannot replace '" + path.string() + "'");
  }
}

Model load_model_json(const json& doc, const std::filesystem::path& base_dir, const Communicator& comm) {
  // On every rank with failure agreement: a data file one rank cannot read fails the load on all.
  return comm.run([&] {
    model_detail::check_depth(doc);  // before anything walks it recursively
    Model m(model_detail::parse(doc, base_dir, comm));
    // One run checks what parsing cannot: sizes and axes agreeing through every op. Inputs without
    // data run as zeros; a numeric failure on such placeholders does not make the file invalid.
    TensorMap placeholders;
    for (const auto& in : m.def_->inputs)
      if (!in.data.defined()) {
        Tensor z = zeros(local_axes(*m.def_, in.axes), in.dtype);
        placeholders[in.name] = m.def_->shard != 0 && in.axes.contains(*m.def_->sharded) ? detail::with_shard(z, m.def_->shard) : z;
      }
    try {
      (void)m.run(placeholders);
    } catch (const NumericError&) {
    }
    return m;
  });
}

json read_model_document(std::string_view text) { return model_detail::parse_checked(text, "/"); }

Model load_model_string(std::string_view text, const std::filesystem::path& base_dir, const Communicator& comm) {
  return comm.run([&] { return load_model_json(read_model_document(text), base_dir, comm); });
}

Model load_model(const std::filesystem::path& path, const Communicator& comm) {
  return comm.run([&] {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ModelError("/: cannot open the model file '" + path.string() + "'");
    std::ostringstream s;
    s << in.rdbuf();
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    return load_model_string(s.str(), dir, comm);
  });
}

}  // namespace tenax
