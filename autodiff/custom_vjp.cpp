// custom_vjp: the forward run unrecorded, one tape node carrying the user's reverse rule.
#include "tenax/autodiff/custom_vjp.h"

#include <memory>
#include <utility>

#include "tenax/autodiff/recording.h"
#include "tenax/core/error.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax {
namespace {

class CustomVjpNode final : public detail::CustomNode {
 public:
  CustomVjpNode(std::string name, CustomVjpRule rule, std::vector<Tensor> inputs, std::vector<Tensor> outputs)
      : name_(std::move(name)),
        rule_(std::move(rule)),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        mapped_(detail::g_mapped) {}

  [[nodiscard]] const char* name() const override { return name_.c_str(); }

  void vjp(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints) override {
    const detail::MappedScope scope(mapped_, detail::MappedScope::replace);
    const std::vector<Tensor> g = rule_(inputs_, outputs_, cotangents);
    if (g.size() != inputs_.size())
      throw AutodiffError(where() + " the VJP rule returned " + std::to_string(g.size()) + " cotangents for " +
                          std::to_string(inputs_.size()) + " inputs");
    for (size_t i = 0; i < g.size(); ++i) {
      if (!g[i].defined() || !adjoints[i].defined()) continue;
      if (!g[i].axes().same_set(inputs_[i].axes()))
        throw AutodiffError(where() + " the VJP rule's cotangent of input " + std::to_string(i) + " has axes " +
                            g[i].axes().describe() + "; the input has " + inputs_[i].axes().describe());
      detail::accumulate(adjoints[i], g[i]);
    }
  }

  [[nodiscard]] int64_t residual_bytes() const override {
    int64_t bytes = 0;
    for (const auto* list : {&inputs_, &outputs_})
      for (const Tensor& t : *list) bytes += t.numel() * int64_t(itemsize(t.dtype()));
    return bytes;
  }

 private:
  [[nodiscard]] std::string where() const { return "[custom_vjp '" + name_ + "']"; }

  std::string name_;
  CustomVjpRule rule_;
  std::vector<Tensor> inputs_, outputs_;
  AxisList mapped_;
};

}  // namespace

std::vector<Tensor> custom_vjp(const std::string& name,
                               const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& forward,
                               const CustomVjpRule& vjp, const std::vector<Tensor>& inputs) {
  const std::string where = "[custom_vjp '" + name + "']";
  if (!forward || !vjp) throw Error(where + " needs a forward function and a VJP rule");
  bool tracked = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) throw Error(where + " input " + std::to_string(i) + " is undefined");
    tracked = tracked || detail::is_tracked(inputs[i]);
  }
  std::vector<Tensor> outputs;
  {
    const detail::PauseRecording pause;
    outputs = forward(inputs);
  }
  if (outputs.empty()) throw Error(where + " the forward function returned no outputs");
  for (size_t k = 0; k < outputs.size(); ++k)
    if (!outputs[k].defined()) throw Error(where + " the forward function's output " + std::to_string(k) + " is undefined");
  if (!tracked) return outputs;
  auto node = std::make_shared<CustomVjpNode>(name, vjp, inputs, outputs);
  detail::g_record_state.recorder->record_custom(std::move(node), inputs, outputs);
  return outputs;
}

}  // namespace tenax
