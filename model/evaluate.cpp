// Running a parsed graph: ops through the registry, scan / nmap / map with their bodies evaluated
// on a copy of the value table; every error is tagged with the JSON pointer of its node.

#include "tenax/autodiff/map.h"
#include "tenax/autodiff/nmap.h"
#include "tenax/autodiff/scan_cache.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/model/constraint.h"
#include "tenax/model/definition.h"
#include "tenax/named/batching.h"

namespace tenax::model_detail {
namespace {

std::vector<Tensor> gather(const std::vector<int>& slots, const std::vector<Tensor>& env) {
  std::vector<Tensor> out;
  out.reserve(slots.size());
  for (int s : slots) out.push_back(env[size_t(s)]);
  return out;
}

// Runs `body` on the value table `local` with its params, then (when given) its captures, bound to
// `args`; returns its results.
std::vector<Tensor> call(const Graph& body, std::vector<Tensor> local, const std::vector<Tensor>& args) {
  for (size_t k = 0; k < args.size(); ++k)
    local[size_t(k < body.params.size() ? body.params[k] : body.captures[k - body.params.size()])] = args[k];
  evaluate(body, local);
  return gather(body.results, local);
}

// The node's op on `in`; where its axes are every axis the first input shows (Node::all_axes),
// with those axes (mapped axes excluded).
Tensor apply_op(const Node& n, const std::vector<Tensor>& in) {
  if (!n.all_axes) return detail::apply(*n.op, in, n.attrs);
  Attrs a = n.attrs;
  a.axes = visible_axes(in[0].axes(), detail::g_mapped);
  return detail::apply(*n.op, in, a);
}

// An axis the op sized itself must have the size /axes declares (a stack of 3 along an axis
// declared 4 would otherwise pass until some other op met it).
void check_sized(const Node& n, const Tensor& out) {
  for (int i = 0; i < n.sized.rank(); ++i) {
    const int d = out.axes().index_of(n.sized.name(i));
    if (d >= 0 && out.axes().size(d) != n.sized.size(i))
      throw ModelError(n.pointer + " (" + n.label + "): gives axis '" + n.sized.name(i).str() + "' size " +
                       std::to_string(out.axes().size(d)) + ", but " + pointer_join("/axes", n.sized.name(i).str()) +
                       " declares " + std::to_string(n.sized.size(i)));
  }
}

void run_node(const Node& n, std::vector<Tensor>& env) {
  switch (n.kind) {
    case NodeKind::op: {
      std::vector<Tensor> in = gather(n.inputs, env);
      Tensor out = apply_op(n, in);
      check_sized(n, out);
      env[size_t(n.outputs[0])] = std::move(out);
      return;
    }
    case NodeKind::scan: {
      const size_t n_carry = n.init.size();
      ScanBody body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
        std::vector<Tensor> args = carry;
        args.insert(args.end(), x.begin(), x.end());
        std::vector<Tensor> r = call(*n.body, env, args);
        std::vector<Tensor> ys(r.begin() + long(n_carry), r.end());
        r.resize(n_carry);
        return std::make_pair(std::move(r), std::move(ys));
      };
      // The body reads only its captures besides carry and x_t: a later evaluation may replay the
      // plan compiled by an earlier one (autodiff/scan_cache.h).
      ScanResult r = detail::scan_cached(body, gather(n.init, env), gather(n.xs, env), n.over[0],
                                         n.scan_options, gather(n.body->captures, env), n.scan_cache);
      for (size_t k = 0; k < n_carry; ++k) env[size_t(n.outputs[k])] = r.carry[k];
      for (size_t k = 0; k < r.ys.size(); ++k) env[size_t(n.outputs[n_carry + k])] = r.ys[k];
      return;
    }
    case NodeKind::nmap: {
      MultiFunction f = [&](const std::vector<Tensor>& args) { return call(*n.body, env, args); };
      std::vector<Tensor> r = nmap(f, n.over, gather(n.inputs, env));
      for (size_t k = 0; k < r.size(); ++k) env[size_t(n.outputs[k])] = r[k];
      return;
    }
    case NodeKind::map: {
      // Outer values the body reads travel as extra arguments (shared by every chunk when they
      // lack the mapped axis), so their gradients survive the recomputed chunks.
      // The reverse pass calls f again after this run returned: it holds the graph (owned by the
      // model) and the table size, nothing of this run's values.
      const Graph* b = n.body.get();
      const size_t slots = env.size();
      MultiFunction f = [b, slots](const std::vector<Tensor>& args) {
        return call(*b, std::vector<Tensor>(slots), args);
      };
      std::vector<Tensor> args = gather(n.inputs, env);
      for (int s : b->captures) args.push_back(env[size_t(s)]);
      std::vector<Tensor> r = map(f, n.over[0], args, n.map_options);
      for (size_t k = 0; k < r.size(); ++k) env[size_t(n.outputs[k])] = r[k];
      return;
    }
  }
}

bool tagged(const char* what) { return what[0] == '/'; }

}  // namespace

void evaluate(const Graph& graph, std::vector<Tensor>& env) {
  for (const Node& n : graph.nodes) {
    try {
      detail::SourceScope source(&n.pointer);  // the backward pass names this node too
      run_node(n, env);
    } catch (const ModelError&) {
      throw;
    } catch (const NumericError& e) {
      if (tagged(e.what())) throw;
      throw NumericError(n.pointer + " (" + n.label + "): " + e.what());
    } catch (const MemoryError& e) {
      if (tagged(e.what())) throw;
      throw MemoryError(n.pointer + " (" + n.label + "): " + e.what());
    } catch (const Error& e) {
      throw ModelError(n.pointer + " (" + n.label + "): " + e.what());
    }
  }
}

std::vector<Tensor> bind(const Definition& def, const std::vector<Tensor>& unconstrained,
                         const std::vector<std::pair<std::string, Tensor>>& inputs) {
  std::vector<Tensor> env(size_t(def.slots));
  const bool on_device = !(def.device == Device::cpu());
  for (size_t k = 0; k < def.constants.size(); ++k)
    env[size_t(def.constants[k].first)] = on_device ? def.device_constants[k] : def.constants[k].second;
  const size_t n_params = def.params.size();
  for (size_t k = 0; k < n_params; ++k) {
    const Parameter& p = def.params[k];
    try {
      env[size_t(def.graph.params[k])] = constrain(p.constraint, unconstrained[k]);
    } catch (const Error& e) {
      throw ModelError(p.pointer + ": " + e.what());
    }
  }
  for (size_t k = 0; k < def.inputs.size(); ++k) {
    const InputDecl& in = def.inputs[k];
    Tensor v = on_device ? def.device_data[k] : in.data;
    for (const auto& [name, t] : inputs)
      if (name == in.name) v = t;
    if (!v.defined())
      throw ModelError(in.pointer + ": input '" + in.name + "' has no data in the model file; pass it to run()");
    env[size_t(def.graph.params[n_params + k])] = v;
  }
  return env;
}

}  // namespace tenax::model_detail
