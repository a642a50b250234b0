// grad / value_and_grad / vjp / jvp on top of the tape.
#include "tenax/autodiff/grad.h"

#include <memory>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/tape_impl.h"
#include "tenax/core/ops.h"
#include "tenax/named/batching.h"

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

// The axes of `t` that an enclosing nmap maps (physically there, invisible to the function).
Axes mapped_of(const Tensor& t) { return split_mapped(t.axes(), detail::g_mapped, true); }

// `t` broadcast (a view) to the axes of `mapped` it lacks.
Tensor widen(const Tensor& t, const Axes& mapped) {
  Axes extra;
  for (int i = 0; i < mapped.rank(); ++i)
    if (!t.has_axis(mapped.name(i))) extra.push_back(mapped[i]);
  if (extra.rank() == 0) return t;
  const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);
  return broadcast(t, extra);
}

// Inside nmap every slice differentiates its own function: an argument the slices share (without
// a mapped axis the value has) is traced again broadcast along it (a view), so that its gradient
// has one slice per slice of the value, as a loop over the slices would give.
Traced trace_per_slice(const Function& f, const std::vector<Tensor>& args) {
  Traced t = trace(f, args, false);
  if (detail::g_mapped.size() == 0) return t;
  const Axes mapped = mapped_of(t.value);
  std::vector<Tensor> wide;
  bool any = false;
  for (const Tensor& a : args) {
    wide.push_back(a.defined() ? widen(a, mapped) : a);
    any = any || wide.back().rank() != a.rank();
  }
  return any ? trace(f, wide, false) : t;
}

// The cotangent of a value with mapped axes: `c` broadcast to them (each slice its own seed).
Tensor seed_per_slice(const Tensor& value, const Tensor& c) {
  const Axes mapped = mapped_of(value);
  if (c.defined()) return widen(c, mapped);
  const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);
  return ones(value.axes(), value.dtype(), value.device());
}

}  // namespace

std::pair<Tensor, std::vector<Tensor>> value_and_grad(const Function& f, const std::vector<Tensor>& args) {
  Traced t = trace_per_slice(f, args);
  const Axes mapped = mapped_of(t.value);
  if (t.value.numel() != mapped.numel())
    throw AutodiffError("[grad] the function returned " + t.value.axes().describe() +
                        (mapped.rank() > 0 ? " (" + mapped.describe() + " mapped by an enclosing nmap)" : "") +
                        "; grad needs a single element (per slice inside nmap; use vjp for other shapes)");
  const Tensor seed = mapped.rank() > 0 ? seed_per_slice(t.value, Tensor()) : Tensor();
  const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);  // the sweep sees every axis
  std::vector<Tensor> g = t.tape->gradient(t.value, t.watched, seed);
  return {t.value, std::move(g)};
}

std::vector<Tensor> grad(const Function& f, const std::vector<Tensor>& args) {
  return value_and_grad(f, args).second;
}

VjpResult vjp(const Function& f, const std::vector<Tensor>& args) {
  auto t = std::make_shared<Traced>(trace_per_slice(f, args));
  VjpResult r;
  r.value = t->value;
  r.pullback = [t](const Tensor& cotangent) {
    if (!cotangent.defined()) throw AutodiffError("[vjp] the cotangent is undefined");
    const Tensor seed = seed_per_slice(t->value, cotangent);
    const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);
    return t->tape->gradient(t->value, t->watched, seed);
  };
  return r;
}

std::pair<Tensor, Tensor> jvp(const Function& f, const std::vector<Tensor>& primals,
                              const std::vector<Tensor>& tangents) {
  if (primals.size() != tangents.size())
    throw AutodiffError("[jvp] " + std::to_string(primals.size()) + " primals but " +
                        std::to_string(tangents.size()) + " tangents");
  Traced t = trace(f, primals, true);
  const detail::MappedScope plain(AxisList{}, detail::MappedScope::replace);  // the sweep sees every axis
  Tensor tangent = t.tape->forward_tangent(t.value, t.watched, tangents);
  return {t.value, tangent};
}

}  // namespace tenax
