// A compiled function's buffers and kernel programs: forward captured once, reverse per kind of pass.
#include "tenax/autodiff/function_program.h"

#include <unordered_set>

#include "tenax/autodiff/scan_program.h"
#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// How replays name themselves in errors: "[cholesky] at a call of a compiled function: ..." (no
// position), and for a device's deferred failures "... in a compiled function call on the GPU".
constexpr const char* kWhat = "a call of a compiled function";
constexpr const char* kDeferredWhat = "compiled function call";
constexpr int64_t kNoPosition = -1;

}  // namespace

FunctionProgram::FunctionProgram(std::shared_ptr<const ScanPlan> plan, const std::vector<Tensor>& args,
                                 bool forward_mode)
    : plan_(std::move(plan)), forward_mode_(forward_mode) {
  const ScanPlan& p = *plan_;
  values_.resize(p.n_vars());
  host_ = args.empty() || args[0].device().kind == Device::Kind::cpu;
  for (int k = 0; k < p.n_x(); ++k) {
    const PlanVar& v = p.var(k);
    values_[static_cast<size_t>(k)] = empty(v.axes, v.dtype, args[static_cast<size_t>(k)].device());
  }
  // On the host the values, and the adjoints with the reverse rules' temporaries, are carved from
  // one block each, in the order the programs first touch them: a long program (a compiled loop)
  // then streams through two packed blocks instead of buffers scattered over the pool's classes.
  // Twice the values' bytes each, for the ops' own temporaries; past that, buffers come one by one.
  if (host_) {
    int64_t total = 16 << 10;
    for (size_t v = 0; v < p.n_vars(); ++v) {
      const PlanVar& pv = p.var(static_cast<int32_t>(v));
      const int64_t bytes = (pv.axes.numel() * static_cast<int64_t>(itemsize(pv.dtype)) + 63) / 64 * 64;
      if (pv.kind == VarKind::op) total += 2 * bytes;
    }
    try {
      values_arena_ = std::make_unique<HostArena>(static_cast<std::size_t>(total));
      adjoints_arena_ = std::make_unique<HostArena>(static_cast<std::size_t>(total));
    } catch (const MemoryError&) {
      values_arena_.reset();  // over the host's memory budget: buffers one by one
      adjoints_arena_.reset();
    }
  }
}

std::vector<Tensor> FunctionProgram::forward(const std::vector<Tensor>& args) {
  for (size_t k = 0; k < args.size(); ++k) copy_into(x_buffer(k), args[k]);
  if (forward_built_) {
    forward_.run(kWhat, kNoPosition);
    forward_.finish(kDeferredWhat);
  } else {
    build_forward();
  }
  std::vector<Tensor> out;
  for (const PlanRef& r : plan_->y_out()) out.push_back(copy_of(plan_->value(values_, r)));
  return out;
}

// The first forward call runs the plan op by op while capturing its kernel calls. On the host the
// replays may skip or fuse copies into buffers that nothing reads after the call (the outputs and
// what the reverse rules save are read after it).
void FunctionProgram::build_forward() {
  {
    HostArenaScope carve(values_arena_.get());
    capture_into(forward_, [&] { plan_->forward(values_); });
  }
  if (host_ && !forward_mode_) {
    BufferSplit b = split_buffers(values_, plan_->read_after_step());
    forward_.allow_copy_forwarding(nullptr, std::move(b.owned), std::move(b.shared));
  }
  forward_built_ = true;
  count_bytes();
}

// What a reverse pass wants — which arguments' adjoints, which outputs seeded, the batch axes —
// and, when that differs from what the reverse program was built for, the new cotangent buffers;
// true when the program must be captured again.
bool FunctionProgram::prepare_pass(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints) {
  const ScanPlan& p = *plan_;
  std::vector<char> x_needs(adjoints.size(), 0), seeded(cotangents.size(), 0);
  for (size_t k = 0; k < adjoints.size(); ++k)
    x_needs[k] = adjoints[k].defined() && is_inexact(p.var(static_cast<int32_t>(k)).dtype);
  // Which values can carry a gradient follows from which arguments want one (kept per pass kind).
  const std::vector<char> needs = backward_built_ && x_needs == x_needs_ ? needs_ : p.needs_grad(x_needs);
  Axes batch;
  bool batch_known = false;
  for (size_t k = 0; k < cotangents.size(); ++k) {
    const int32_t v = p.y_out()[k].var;
    if (!cotangents[k].defined() || v < 0 || !needs[static_cast<size_t>(v)]) continue;
    seeded[k] = 1;
    if (!batch_known) batch = batch_axes_of(cotangents[k], p.var(v).axes);
    batch_known = true;
  }
  const bool rebuild = !backward_built_ || x_needs != x_needs_ || seeded != seeded_ || !(batch == batch_);
  if (rebuild) {
    x_needs_ = x_needs;
    seeded_ = seeded;
    needs_ = needs;
    batch_ = batch;
    cot_.assign(cotangents.size(), Tensor());
    for (size_t k = 0; k < cotangents.size(); ++k) {
      if (!seeded_[k]) continue;
      const PlanVar& v = p.var(p.y_out()[k].var);
      cot_[k] = empty(with_batch(v.axes, batch), v.dtype, cotangents[k].device());
    }
  }
  return rebuild;
}

void FunctionProgram::backward(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints) {
  const bool rebuild = prepare_pass(cotangents, adjoints);
  for (size_t k = 0; k < cotangents.size(); ++k)
    if (seeded_[k]) copy_into(cot_[k], cotangents[k]);
  if (rebuild) {
    build_backward();  // runs the programs as it captures them
  } else {
    seed_.run(kWhat, kNoPosition);
    vjp_.run(kWhat, kNoPosition);
    seed_.finish(kDeferredWhat);
    vjp_.finish(kDeferredWhat);
  }
  for (size_t k = 0; k < adjoints.size(); ++k)
    if (x_needs_[k]) accumulate(adjoints[k], adjoints_[static_cast<size_t>(k)]);
}

// The seed program allocates the adjoints of every value that can carry a gradient (not zeroed:
// each stays flagged fresh until its first writer) and starts the outputs' from the cotangents;
// the reverse program runs every rule, then zero-fills the adjoints of arguments nothing reached.
void FunctionProgram::build_backward() {
  const ScanPlan& p = *plan_;
  seed_ = KernelProgram();
  vjp_ = KernelProgram();
  adjoints_.assign(p.n_vars(), Tensor());
  std::vector<char> fresh(p.n_vars(), 0);
  HostArenaScope carve(adjoints_arena_.get());
  capture_into(seed_, [&] {
    for (size_t v = 0; v < p.n_vars(); ++v)
      if (needs_[v]) p.allocate(values_, adjoints_, static_cast<int32_t>(v), batch_, fresh);
    for (size_t k = 0; k < cot_.size(); ++k) {
      if (!seeded_[k]) continue;
      const int32_t v = p.y_out()[k].var;
      if (fresh[static_cast<size_t>(v)]) {
        copy_into(adjoints_[static_cast<size_t>(v)], cot_[k]);
        fresh[static_cast<size_t>(v)] = 0;
      } else {
        accumulate(p.adjoint(values_, adjoints_, v, batch_, &fresh), cot_[k]);
      }
    }
  });
  capture_into(vjp_, [&] {
    p.backward(values_, adjoints_, needs_, batch_, &fresh);
    for (size_t k = 0; k < x_needs_.size(); ++k)
      if (x_needs_[k]) (void)p.adjoint(values_, adjoints_, static_cast<int32_t>(k), batch_, &fresh);
  });
  // Only the reverse program reads the adjoints of the intermediate values; those of the
  // arguments and outputs, and the cotangent buffers, are read or written outside it too.
  if (host_) {
    std::vector<char> shared(p.n_vars(), 0);
    for (size_t k = 0; k < x_needs_.size(); ++k) shared[k] = 1;
    for (const PlanRef& r : p.y_out())
      if (r.var >= 0) shared[static_cast<size_t>(r.var)] = 1;
    BufferSplit b = split_buffers(adjoints_, shared);
    for (const Tensor& t : cot_)
      if (t.defined()) b.shared.push_back(t.storage());
    vjp_.allow_copy_forwarding(&seed_, std::move(b.owned), std::move(b.shared));
  }
  backward_built_ = true;
  count_bytes();
}

std::vector<Tensor> FunctionProgram::tangent(const std::vector<Tensor>& tangents, const Axes& batch) {
  if (!forward_mode_) throw AutodiffError("[jvp] internal: a compiled program made without forward mode");
  const ScanPlan& p = *plan_;
  std::vector<char> given(tangents.size(), 0);
  for (size_t k = 0; k < tangents.size(); ++k) given[k] = tangents[k].defined();
  const bool rebuild = !tangent_built_ || given != tangent_args_ || !(batch == tangent_batch_);
  if (rebuild) {
    tangent_args_ = given;
    tangent_batch_ = batch;
    tangents_.assign(p.n_vars(), Tensor());
    for (size_t k = 0; k < tangents.size(); ++k) {
      if (!given[k]) continue;
      const PlanVar& v = p.var(static_cast<int32_t>(k));
      tangents_[k] = empty(with_batch(v.axes, batch), v.dtype, tangents[k].device());
    }
  }
  for (size_t k = 0; k < tangents.size(); ++k)
    if (given[k]) copy_into(tangents_[k], tangents[k]);
  if (rebuild) {
    tangent_ = KernelProgram();
    capture_into(tangent_, [&] { p.forward_tangent(values_, tangents_, batch); });
    tangent_built_ = true;
    count_bytes();
  } else {
    tangent_.run(kWhat, kNoPosition);
    tangent_.finish(kDeferredWhat);
  }
  std::vector<Tensor> out;
  for (const PlanRef& r : p.y_out()) {
    const Tensor* t = r.var >= 0 && tangents_[static_cast<size_t>(r.var)].defined() ? &tangents_[static_cast<size_t>(r.var)]
                                                                                    : nullptr;
    if (t) {
      out.push_back(copy_of(*t));
    } else {
      const Tensor& v = p.value(values_, r);
      out.push_back(zeros_with_batch(v.axes(), batch, v.dtype(), v.device()));
    }
  }
  return out;
}

void FunctionProgram::count_bytes() {
  int64_t n = 0;
  std::unordered_set<const void*> seen;  // a lent adjoint shares its cotangent's buffer
  for (const std::vector<Tensor>* list : {&values_, &adjoints_, &cot_, &tangents_})
    for (const Tensor& t : *list)
      if (t.defined() && seen.insert(t.data_ptr()).second) n += bytes_of(t);
  bytes_ = n;
}

}  // namespace tenax::detail
