// grad / value_and_grad / vjp / jvp on top of the tape.
#include "tenax/autodiff/grad.h"

#include <memory>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/tape_impl.h"

namespace tenax {
namespace {

struct Traced {
  std::shared_ptr<detail::TapeImpl> tape;
  std::vector<Tensor> watched;
  Tensor value;
};

Traced trace(const Function& f, const std::vector<Tensor>& args, bool keep_all) {
  Traced t{detail::new_tape(), {}, {}};
  if (keep_all) t.tape->keep_all();
  detail::RecordingScope scope(t.tape.get());
  for (const Tensor& a : args) t.watched.push_back(t.tape->watch(a));
  t.value = f(t.watched);
  if (!t.value.defined()) throw AutodiffError("[grad] the function returned an undefined tensor");
  return t;
}

}  // namespace

std::pair<Tensor, std::vector<Tensor>> value_and_grad(const Function& f, const std::vector<Tensor>& args) {
  Traced t = trace(f, args, false);
  if (t.value.numel() != 1)
    throw AutodiffError("[grad] the function returned " + t.value.axes().describe() +
                        "; grad needs a single element (use vjp for other shapes)");
  std::vector<Tensor> g = t.tape->gradient(t.value, t.watched, Tensor());
  return {t.value, std::move(g)};
}

std::vector<Tensor> grad(const Function& f, const std::vector<Tensor>& args) {
  return value_and_grad(f, args).second;
}

VjpResult vjp(const Function& f, const std::vector<Tensor>& args) {
  auto t = std::make_shared<Traced>(trace(f, args, false));
  VjpResult r;
  r.value = t->value;
  r.pullback = [t](const Tensor& cotangent) {
    if (!cotangent.defined()) throw AutodiffError("[vjp] the cotangent is undefined");
    return t->tape->gradient(t->value, t->watched, cotangent);
  };
  return r;
}

std::pair<Tensor, Tensor> jvp(const Function& f, const std::vector<Tensor>& primals,
                              const std::vector<Tensor>& tangents) {
  if (primals.size() != tangents.size())
    throw AutodiffError("[jvp] " + std::to_string(primals.size()) + " primals but " +
                        std::to_string(tangents.size()) + " tangents");
  Traced t = trace(f, primals, true);
  Tensor tangent = t.tape->forward_tangent(t.value, t.watched, tangents);
  return {t.value, tangent};
}

}  // namespace tenax
