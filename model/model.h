#pragma once
// Models described in JSON (docs/model_format.md, model/schema.json): load, validate, run,
// differentiate with respect to the trainable parameters in unconstrained space, and save.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tenax/core/distributed.h"
#include "tenax/core/tensor.h"
#include "tenax/model/model_axes.h"

namespace tenax {

namespace model_detail {
struct Definition;
}

/// Named tensors passed to or returned from a model.
using TensorMap = std::map<std::string, Tensor>;

/// What value_and_grad returns: the output and one gradient per trainable parameter (same order
/// as Model::trainable(), each with its parameter's axes, in unconstrained coordinates).
struct ModelGradient {
  Tensor value;
  std::vector<Tensor> grads;
};

/// A loaded model. Copies share nothing mutable: parameters are per copy.
class Model {
 public:
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&);
  Model& operator=(const Model&);
  ~Model();

  /// Evaluates every named output. `inputs` supplies or overrides the model's inputs by name (axes
  /// as declared, in any order); an input with no data in the file must be given here.
  [[nodiscard]] TensorMap run(const TensorMap& inputs = {}) const;
  /// One output (must be a scalar for value_and_grad).
  [[nodiscard]] Tensor run(const std::string& output, const TensorMap& inputs = {}) const;
  /// The output `output` (a scalar) and its gradient with respect to every trainable parameter in
  /// unconstrained coordinates. A sharded model returns the global value and gradient on every
  /// rank (run and value_and_grad are collectives there, with failure agreement).
  [[nodiscard]] ModelGradient value_and_grad(const std::string& output, const TensorMap& inputs = {}) const;

  /// Names of all parameters, in file order.
  [[nodiscard]] std::vector<std::string> parameters() const;
  /// Names of the trainable parameters, in file order (the order of ModelGradient::grads).
  [[nodiscard]] std::vector<std::string> trainable() const;
  /// A parameter's value (constrained: what the graph sees).
  [[nodiscard]] Tensor parameter(const std::string& name) const;
  /// Sets a parameter's value; it must have the declared axes and satisfy its constraint.
  void set_parameter(const std::string& name, const Tensor& value);
  /// A parameter's constraint as the reference names it: "unconstrained", "positive (softplus)",
  /// "positive (exp)", "interval (a, b)" or "spd over (row, col)".
  [[nodiscard]] std::string constraint(const std::string& name) const;
  /// A parameter in unconstrained coordinates.
  [[nodiscard]] Tensor unconstrained(const std::string& name) const;
  void set_unconstrained(const std::string& name, const Tensor& value);
  /// The trainable parameters' unconstrained values, concatenated (row-major, file order): what
  /// an optimiser works on.
  [[nodiscard]] std::vector<double> unconstrained_vector() const;
  void set_unconstrained_vector(std::span<const double> values);
  /// Gradients from value_and_grad flattened in the order of unconstrained_vector() (copied to the
  /// host when the model runs on a device).
  [[nodiscard]] static std::vector<double> flatten(const std::vector<Tensor>& grads);

  /// Where runs compute (default: the host). Parameters and data from the file stay on the host
  /// (what parameter(), set_parameter() and save() read and write); set_device copies the data and
  /// constants to `device` once, and every run moves the parameters there (they are small), so
  /// outputs and gradients come back on `device`. Inputs passed to run() must already be there
  /// (ModelError otherwise: no silent transfer). Throws DeviceError when `device` is unavailable.
  void set_device(Device device);
  [[nodiscard]] Device device() const;

  /// The names of the outputs and of the inputs, in file order.
  [[nodiscard]] std::vector<std::string> outputs() const;
  [[nodiscard]] std::vector<std::string> inputs() const;
  /// An input's data from the model file, on the host (undefined when the caller must supply it;
  /// missing values read as NaN where the input declares "missing": true).
  [[nodiscard]] Tensor input(const std::string& name) const;
  /// The communicator the model was loaded with, and the axis the file shards across it
  /// ("sharded"; docs/scaling.md): inputs with that axis hold this rank's block.
  [[nodiscard]] const Communicator& communicator() const;
  [[nodiscard]] std::optional<Name> sharded_axis() const;
  /// The axes the model declares, with their sizes.
  [[nodiscard]] const ModelAxes& axes() const;

  /// The model as JSON, with its current parameters (their values and unconstrained coordinates,
  /// so that a loaded copy reproduces every output bit for bit) and data file paths relative to
  /// `directory`.
  [[nodiscard]] nlohmann::json to_json(const std::filesystem::path& directory) const;
  /// Writes to_json(path's folder) to `path`; the file is written completely or not at all.
  void save(const std::filesystem::path& path) const;

 private:
  explicit Model(std::unique_ptr<model_detail::Definition> def);
  [[nodiscard]] ModelGradient value_and_grad_here(const std::string& output, const TensorMap& inputs) const;
  friend Model load_model_json(const nlohmann::json&, const std::filesystem::path&, const Communicator&);
  std::unique_ptr<model_detail::Definition> def_;
};

/// Reads and validates a model file; data file paths are relative to the file's folder.
/// Throws ModelError naming the JSON pointer of the first problem. A file that shards an axis
/// ("sharded") splits it across `comm` (default: this process alone, which holds all of it): each
/// rank reads its block of the inputs with that axis. Loading is then a collective on `comm`, with
/// failure agreement (a data file one rank cannot read fails the load on every rank).
Model load_model(const std::filesystem::path& path, const Communicator& comm = Communicator());
/// Parses `text`; data file paths are relative to `base_dir`.
Model load_model_string(std::string_view text, const std::filesystem::path& base_dir = ".",
                        const Communicator& comm = Communicator());
/// Builds a model from a parsed document.
Model load_model_json(const nlohmann::json& doc, const std::filesystem::path& base_dir = ".",
                      const Communicator& comm = Communicator());
/// The document of a model file's text, read as load_model_string reads it (a key written twice,
/// nesting past 128 levels or a syntax error is a ModelError, the last with its line and column),
/// for a program that edits the document before load_model_json.
nlohmann::json read_model_document(std::string_view text);

}  // namespace tenax
