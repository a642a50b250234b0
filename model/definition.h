#pragma once
// The in-memory form of a loaded model: parameters, inputs, and the graph with every name resolved
// to a slot of a flat value table. Internal to the model layer.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tenax/autodiff/map.h"
#include "tenax/autodiff/scan.h"
#include "tenax/autodiff/scan_cache.h"
#include "tenax/core/distributed.h"
#include "tenax/core/ops/op.h"
#include "tenax/model/constraint.h"
#include "tenax/model/model_axes.h"

namespace tenax::model_detail {

using json = nlohmann::json;

/// Deepest nesting of control-flow bodies (a scan inside an nmap inside ...) a model may have.
/// Real models nest two or three; the bound keeps parsing and running within any thread's stack.
inline constexpr int kMaxBodyDepth = 32;

/// `base` + "/" + key, with '~' and '/' escaped as RFC 6901 asks.
std::string pointer_join(const std::string& base, const std::string& key);
std::string pointer_join(const std::string& base, std::size_t index);

struct Parameter {
  std::string name;
  std::string pointer;  ///< "/parameters/<name>"
  Axes axes;
  bool trainable = true;
  Constraint constraint;
  Tensor u;  ///< unconstrained coordinates (model dtype, or its complex dtype: "complex": true)
};

struct InputDecl {
  std::string name;
  std::string pointer;
  Axes axes;
  Tensor data;                  ///< undefined when the caller must supply it
  std::filesystem::path file;   ///< absolute path when the data came from a file
  DType dtype = DType::f64;     ///< the model's dtype, or its complex dtype ("complex": true)
};

enum class NodeKind { op, scan, nmap, map };

struct Graph;

/// One node of a graph. Inputs and outputs are slots of the value table.
struct Node {
  std::string pointer;  ///< "/graph/3" or "/graph/2/body/graph/0"
  std::string label;    ///< op name, for messages
  NodeKind kind = NodeKind::op;
  const OpDef* op = nullptr;
  Attrs attrs;
  bool all_axes = false;  ///< Attrs::axes is every axis the first input shows (a reduction with no "axes")
  Axes sized;  ///< axes the op sizes itself (rename targets, stack's axis): declared sizes to check
  std::vector<int> inputs;
  std::vector<int> outputs;
  // Control flow: scan (init, xs), nmap/map (inputs), the body, and the options.
  std::vector<int> init;
  std::vector<int> xs;
  AxisList over;
  std::unique_ptr<Graph> body;
  ScanOptions scan_options;
  /// A scan's plan and compiled step, kept from one evaluation to the next (a fit evaluates the
  /// same graph many times): reused while the axes, the options and the untracked values it reads
  /// stay the same (autodiff/scan_cache.h).
  std::shared_ptr<detail::ScanCache> scan_cache;
  MapOptions map_options;
};

/// A graph: slots bound by the caller (`params`), nodes in an order where every input is
/// computed before it is read, and the result slots.
struct Graph {
  std::vector<int> params;
  /// Outer slots the graph reads (bodies only): map passes them as arguments so that gradients
  /// reach them through its rematerialised chunks.
  std::vector<int> captures;
  std::vector<Node> nodes;
  std::vector<int> results;
};

struct Definition {
  json doc;  ///< the document as loaded (save() writes it back with the current parameters)
  std::filesystem::path base_dir;
  DType dtype = DType::f64;
  ModelAxes axes;  ///< what the file declares under /axes
  /// The axis the file shards across `comm` ("sharded"), its sharding (0: none) and this rank's
  /// block of it. Inputs with the axis hold this rank's block, marked sharded.
  Communicator comm;
  std::optional<Name> sharded;
  uint16_t shard = 0;
  std::vector<Parameter> params;
  std::vector<InputDecl> inputs;
  std::vector<std::pair<int, Tensor>> constants;  ///< literal numbers in input lists
  std::vector<std::pair<std::string, int>> outputs;
  int slots = 0;
  /// params: the parameters' slots (constrained values), then the inputs' slots.
  Graph graph;
  /// Per output (in the order of `outputs`): the part of `graph` that output needs (pruned), what
  /// run(name) and value_and_grad(name) evaluate.
  std::vector<Graph> output_graphs;
  /// Where runs compute (Model::set_device). Parameters and file data stay on the host; runs use
  /// copies on this device made once by set_device (`device_constants`, `device_data`, in the
  /// order of `constants` and `inputs`; empty on the host).
  Device device = Device::cpu();
  std::vector<Tensor> device_constants, device_data;
};

/// Builds a definition from a document; throws ModelError with the pointer of the first problem.
std::unique_ptr<Definition> parse(const json& doc, const std::filesystem::path& base_dir,
                                  const Communicator& comm = Communicator());

/// Slots `g` reads that it does not define itself: what a body captures from outside.
std::vector<int> outer_reads(const Graph& g);

/// The part of `g` that the slots `needed` depend on: unread nodes dropped, and control flow
/// keeping only the results read (a scan also the carries those depend on), bodies pruned to
/// match; scan caches fresh. params, captures and results are g's.
Graph pruned(const Graph& g, const std::vector<int>& needed);

/// Evaluates `graph` with `env` holding the values of its params and every outer slot it reads.
void evaluate(const Graph& graph, std::vector<Tensor>& env);

/// The full value table for a run: constants, parameters mapped through their constraints (with
/// the given unconstrained values, which may be tracked), and inputs (overrides or file data).
std::vector<Tensor> bind(const Definition& def, const std::vector<Tensor>& unconstrained,
                         const std::vector<std::pair<std::string, Tensor>>& inputs);

}  // namespace tenax::model_detail
