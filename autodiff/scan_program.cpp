// A scan step compiled to kernel programs: captured on first use, replayed afterwards.
#include "tenax/autodiff/scan_program.h"

#include <algorithm>

#include "tenax/core/env.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/capture.h"

namespace tenax::detail {
namespace {

bool any(const std::vector<char>& flags) { return std::find(flags.begin(), flags.end(), 1) != flags.end(); }

// Whether `a` shares its storage with any of `others` (undefined ones skipped).
bool overlaps(const Tensor& a, const std::vector<Tensor>& others) {
  for (const Tensor& b : others)
    if (b.defined() && b.numel() > 0 && b.storage().get() == a.storage().get()) return true;
  return false;
}

}  // namespace

bool aliases(const Tensor& a, const std::vector<Tensor>& buffers) {
  const auto* p = static_cast<const char*>(a.data_ptr());
  for (const Tensor& b : buffers) {
    const auto* lo = static_cast<const char*>(b.data_ptr());
    if (p >= lo && p < lo + bytes_of(b)) return true;
  }
  return false;
}

void hand_on(const std::vector<Tensor>& dst, std::vector<Tensor> src, const std::vector<Tensor>& read) {
  auto in_place = [&](size_t k) {
    if (!src[k].defined() || src[k].data_ptr() != dst[k].data_ptr() || !(src[k].axes() == dst[k].axes()))
      return false;
    for (int i = 0; i < dst[k].rank(); ++i)
      if (src[k].strides()[i] != dst[k].strides()[i]) return false;
    return true;
  };
  std::vector<Tensor> buffers;
  for (const Tensor& t : read)
    if (t.defined()) buffers.push_back(t);
  for (size_t k = 0; k < dst.size(); ++k)
    if (dst[k].defined() && src[k].defined() && !in_place(k) && aliases(src[k], buffers)) src[k] = copy_of(src[k]);
  for (size_t k = 0; k < dst.size(); ++k) {
    if (!dst[k].defined() || in_place(k)) continue;
    if (src[k].defined())
      copy_into(dst[k], src[k]);
    else
      fill_zero(dst[k]);
  }
}

BufferSplit split_buffers(const std::vector<Tensor>& tensors, const std::vector<char>& shared) {
  BufferSplit b;
  for (size_t v = 0; v < tensors.size(); ++v) {
    if (!tensors[v].defined() || tensors[v].numel() == 0) continue;
    if (shared[v]) {
      b.shared.push_back(tensors[v].storage());
    } else {
      b.owned.push_back(tensors[v].data_ptr());
    }
  }
  return b;
}

StepProgram::StepProgram(std::shared_ptr<const ScanPlan> plan, const std::vector<Tensor>& carry,
                         const std::vector<Tensor>& xs, Name over, bool reverse, int64_t steps, bool reusable)
    : plan_(std::move(plan)), over_(over), reverse_(reverse), steps_(steps), reusable_(reusable) {
  const ScanPlan& p = *plan_;
  values_.resize(p.n_vars());
  // A reusable program's captured calls read its own copies of the parameters (not in the arena:
  // the reverse pass never restores them).
  for (size_t k = 0; k < p.params().size(); ++k)
    values_[static_cast<size_t>(p.param_var(k))] = reusable ? copy_of(p.params()[k]) : p.params()[k];
  // On the host a step's carries, inputs x_t and intermediates lie in one arena (the carries and
  // x_t carved here, the intermediates when forward() captures the step), so that one copy keeps
  // or restores all a reverse step reads of them (keep_residuals). Its size: the carries and x_t,
  // and twice what the plan's values take, for the ops' own temporaries (a step that needs more
  // overflows it, and its intermediates are then never kept).
  if (carry.empty() || carry[0].device().kind == Device::Kind::cpu) {
    auto bytes = [](const PlanVar& v) {
      return (v.axes.numel() * static_cast<int64_t>(itemsize(v.dtype)) + 63) / 64 * 64;
    };
    int64_t total = 16 << 10;
    for (size_t v = 0; v < p.n_vars(); ++v) {
      const PlanVar& pv = p.var(static_cast<int32_t>(v));
      if (pv.kind == VarKind::carry || pv.kind == VarKind::x) total += bytes(pv);
      if (pv.kind == VarKind::op) total += 2 * bytes(pv);
    }
    try {
      arena_ = std::make_unique<HostArena>(static_cast<std::size_t>(total));
    } catch (const MemoryError&) {
      // Over the host's memory budget: buffers one by one as they come (nothing kept).
    }
  }
  HostArenaScope carve(arena_.get());
  for (int k = 0; k < p.n_carry(); ++k) {
    const PlanVar& v = p.var(k);
    carry_.push_back(empty(v.axes, v.dtype, carry[static_cast<size_t>(k)].device()));
    values_[static_cast<size_t>(k)] = carry_.back();
  }
  for (int k = 0; k < p.n_x(); ++k) {
    const PlanVar& v = p.var(p.n_carry() + k);
    Tensor buf = empty(v.axes, v.dtype, xs[static_cast<size_t>(k)].device());
    x_load_.emplace_back(buf, xs[static_cast<size_t>(k)], over, true, false, true);
    values_[static_cast<size_t>(p.n_carry() + k)] = buf;
    x_base_.push_back(std::make_unique<KernelProgram::MovingBase>());
  }
  x_in_place_.assign(x_load_.size(), 0);
  x_unkept_.assign(x_load_.size(), 0);
  x_load_back_.assign(x_load_.size(), 0);
  for (size_t k = 0; k < carry_.size(); ++k)
    carry_base_.push_back(std::make_unique<KernelProgram::MovingBase>());
  carry_slots_.assign(carry_.size(), Tensor());
  carry_load_.assign(carry_.size(), SliceCopy());
  carry_moved_.assign(carry_.size(), 0);
  carry_in_place_.assign(carry_.size(), 0);
  carry_load_back_.assign(carry_.size(), 0);
}

void StepProgram::read_carries_from(const std::vector<Tensor>& slots, Name axis) {
  for (size_t k = 0; k < carry_.size(); ++k) {
    carry_slots_[k] = k < slots.size() && on_host() && !reverse_ ? slots[k] : Tensor();
    carry_load_[k] =
        carry_slots_[k].defined() ? SliceCopy(carry_[k], carry_slots_[k], axis, true, false) : SliceCopy();
  }
  if (forward_built_) read_carries_in_place();
}

void StepProgram::release_call() {
  for (size_t k = 0; k < carry_.size(); ++k) {
    carry_slots_[k] = Tensor();
    carry_load_[k] = SliceCopy();
  }
  residuals_ = Tensor();  // all steps' intermediates: a kept program holds one step's buffers only
  residual_steps_ = 0;
  ys_bar_.clear();
  xs_adj_.clear();
  // The slice copies let go of the call's tensors; the next call's laid out alike rebind them.
  for (std::vector<SliceCopy>* copies : {&x_load_, &y_seed_, &x_adj_store_})
    for (SliceCopy& c : *copies) c.release();
}

void StepProgram::load_carries(int64_t s) {
  for (size_t k = 0; k < carry_.size(); ++k)
    if (carry_in_place_[k]) carry_load_[k].run(s);
}

void StepProgram::rebind(const std::vector<Tensor>& xs, const std::vector<Tensor>& params) {
  if (!reusable_) throw Error("[scan] internal: rebind() on a program that is not reusable");
  for (size_t k = 0; k < x_load_.size(); ++k) {
    const Tensor& buf = x_buffer(k);
    if (!x_load_[k].rebind(xs[k])) x_load_[k] = SliceCopy(buf, xs[k], over_, true, false, true);
    // An input read in place whose new tensor is laid out otherwise: its calls read the buffer
    // again (base: the buffer, not moving), loaded before every step, forward and reverse.
    if (x_in_place_[k] && !x_load_[k].moving_base(origin(), dir(), *x_base_[k])) {
      *x_base_[k] = {static_cast<const char*>(buf.data_ptr()), 0};
      x_in_place_[k] = 0;
      x_load_back_[k] = 1;
      ++forward_gen_;
      ++backward_gen_;
    }
  }
  for (size_t k = 0; k < params.size(); ++k)
    copy_into(values_[static_cast<size_t>(plan_->param_var(k))], params[k]);
}

void StepProgram::add_param_adjoints(const std::vector<Tensor>& param_adj) const {
  for (size_t k = 0; k < param_adj.size(); ++k)
    if (param_adj[k].defined()) accumulate(param_adj[k], adjoints_[static_cast<size_t>(plan_->param_var(k))]);
}

void StepProgram::set_carry(const std::vector<Tensor>& carry) {
  for (size_t k = 0; k < carry_.size(); ++k) copy_into(carry_[k], carry[k]);
}

// On a device the slice copies are part of the programs (SliceCopy::run_or_record): one graph
// per step runs them with the step's calls. On the host they run apart, as the fused scalar loops
// want them (append_forward, append_backward).
void StepProgram::forward(int64_t s) {
  const bool host = on_host();
  if (host)
    for (size_t k = 0; k < x_load_.size(); ++k)
      if (!x_in_place_[k]) x_load_[k].run(index(s));
  if (forward_built_) {
    forward_.run("scan step", s, s);
    return;
  }
  build_forward(s);
}

void StepProgram::build_forward(int64_t s) {
  const bool host = on_host();
  {
    LoopPositionScope where("scan step", s);
    HostArenaScope carve(arena_.get());  // the step's intermediates (host), see the constructor
    capture_into(forward_, [&] {
      if (!host)
        for (SliceCopy& c : x_load_) c.run_or_record(s, origin(), dir());
      plan_->forward(values_);
    });
  }
  // On the host the replays may fuse calls whose intermediate value nobody reads after the step
  // (KernelProgram::allow_copy_forwarding): the buffers of the values read after it are shared,
  // those of the other op results the program's own (views share their parent's buffer).
  if (host) {
    BufferSplit b = split_buffers(values_, plan_->read_after_step());
    forward_.allow_copy_forwarding(nullptr, std::move(b.owned), std::move(b.shared));
    read_x_in_place();
    read_carries_in_place();
  }
  forward_built_ = true;
  ++forward_gen_;
}

// Whether a value read outside the programs — a new carry handed on, an output — lies in `buf`
// (then the copies that read it need the buffer filled).
bool StepProgram::read_outside(const Tensor& buf) const {
  for (const std::vector<PlanRef>* refs : {&plan_->carry_out(), &plan_->y_out()})
    for (const PlanRef& r : *refs)
      if (r.var >= 0 && aliases(plan_->value(values_, r), {buf})) return true;
  return false;
}

// Copying x_t into its buffer before each step (and again before each recomputed step of the
// reverse pass) moved a whole slice per step where the step may read it once: the diffusion
// example's observations, 1 MB a step. Where the forward program's loop calls are all that read
// the buffer, they read the scanned tensor's slice instead (KernelProgram::read_in_place, the
// slice's address per step from x_base_): not where a slice is laid out otherwise, nor where a
// carry handed on or an output is (a view of) x_t, which copies outside the program read.
// TENAX_SCAN_IN_PLACE=0 keeps the copies (for comparison and debugging).
void StepProgram::read_x_in_place() {
  static const bool on = env_switch("TENAX_SCAN_IN_PLACE");
  if (!on) return;
  for (size_t k = 0; k < x_load_.size(); ++k) {
    const Tensor& buf = x_buffer(k);
    if (!buf.defined() || buf.numel() == 0 || !x_load_[k].moving_base(origin(), dir(), *x_base_[k]) ||
        read_outside(buf))
      continue;
    x_in_place_[k] = x_unkept_[k] =
        forward_.read_in_place(buf.data_ptr(), bytes_of(buf), x_base_[k].get()) > 0;
  }
}

// Carry s is in slot s of a buffer the scan keeps anyway (an output's, which holds the initial
// carry and each new carry): where the forward program's calls that read the carry buffer can
// read the slot (loop calls, and the operands a tridiagonal solve only reads), they do, so that
// the next carry is no longer copied into the buffer after each step, nor a checkpoint into it
// before each recomputed step. Decided once per program; a later call repoints the base at its
// slots or, with none (no tape, so no such buffer), at the carry buffer, which next_carry() then
// loads again.
void StepProgram::read_carries_in_place() {
  static const bool on = env_switch("TENAX_SCAN_IN_PLACE");
  bool changed = false;
  for (size_t k = 0; k < carry_.size(); ++k) {
    const Tensor& buf = carry_[k];
    KernelProgram::MovingBase& b = *carry_base_[k];
    const bool slots = carry_slots_[k].defined() && carry_load_[k].moving_base(0, 1, b);
    if (!carry_moved_[k] && on && slots && buf.numel() > 0 && !read_outside(buf))
      carry_moved_[k] = forward_.read_in_place(buf.data_ptr(), bytes_of(buf), &b) > 0;
    const char now = carry_moved_[k] && slots ? 1 : 0;
    if (carry_moved_[k] && !slots) b = {static_cast<const char*>(buf.data_ptr()), 0};
    changed = changed || now != carry_in_place_[k];
    carry_in_place_[k] = now;
  }
  if (changed && next_built_) {  // the next carry's copies as this call needs them
    next_ = KernelProgram();
    next_built_ = false;
  }
  if (changed) ++forward_gen_;
}

// An input or carry once read in place is not among the bytes keep_residuals keeps (restore()
// does not put it back): the reverse step reads it in place too where both reverse programs can
// (each redirects what it can; where one cannot, it is loaded first).
void StepProgram::read_x_in_place_back() {
  auto back = [&](const Tensor& buf, const KernelProgram::MovingBase* base) {
    const bool seed = seed_.read_in_place(buf.data_ptr(), bytes_of(buf), base) >= 0;
    const bool vjp = vjp_.read_in_place(buf.data_ptr(), bytes_of(buf), base) >= 0;
    return seed && vjp;
  };
  for (size_t k = 0; k < x_load_.size(); ++k)
    x_load_back_[k] = x_unkept_[k] && !(x_in_place_[k] && back(x_buffer(k), x_base_[k].get()));
  for (size_t k = 0; k < carry_.size(); ++k)
    carry_load_back_[k] = carry_moved_[k] && !(carry_in_place_[k] && back(carry_[k], carry_base_[k].get()));
}

// What the reverse step reads of the forward step's arena: the buffers of the values its rules
// read (what the reverse rules save, ScanPlan::read_after_step; a view's whole parent buffer).
// Not x_t: the scanned tensor holds it, and a kept step loads it again before its reverse step
// (keep_residuals). Nor the carries into the step: every step's are in the checkpoints, which
// the reverse pass loads them from as restore() puts back the rest (held twice, they made the
// kept steps of seed 002's LSTM 1.4x the bytes). The other intermediates, the ops' own
// temporaries among them, are neither saved nor restored.
void StepProgram::keep_read_buffers() {
  const auto* lo = static_cast<const char*>(arena_->block()->data());
  const char* hi = lo + arena_->used();
  const std::vector<char> read = plan_->read_after_step(true);
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (size_t v = 0; v < values_.size(); ++v) {
    if (!read[v] || !values_[v].defined() || !values_[v].storage()) continue;
    // x_t (read in place or loaded again) and carries read in place are not kept.
    const auto* at = static_cast<const char*>(values_[v].storage()->data());
    bool in_place = false;
    for (size_t k = 0; k < x_load_.size(); ++k)
      in_place = in_place || at == x_buffer(k).storage()->data();
    for (size_t k = 0; k < carry_.size(); ++k) in_place = in_place || at == carry_[k].storage()->data();
    if (in_place) continue;
    const std::size_t bytes = values_[v].storage()->bytes();
    if (at >= lo && at + bytes <= hi) ranges.emplace_back(static_cast<std::size_t>(at - lo), bytes);
  }
  if (!ranges.empty()) arena_->keep_only(std::move(ranges));
  arena_kept_ = true;
}

bool StepProgram::keep_residuals(int64_t budget, int64_t from) {
  residual_steps_ = 0;  // nothing of an earlier pass (a reused program) counts
  if (arena_ && !arena_->overflowed() && forward_built_ && !arena_kept_) keep_read_buffers();
  const auto used = arena_ ? static_cast<int64_t>(arena_->saved()) : 0;
  // As many of the steps from `from` as the budget holds, the first ones: a scan a little over
  // its budget recomputes a few steps, not all of them.
  const int64_t n = used > 0 && budget > 0 ? std::min(std::max<int64_t>(steps_ - from, 0), budget / used) : 0;
  if (!arena_ || arena_->overflowed() || !forward_built_ || n <= 0) {
    residuals_ = Tensor();
    return false;
  }
  try {
    if (!residuals_.defined() || residuals_.numel() != n * used)
      residuals_ = empty(Axes{{"step", n}, {"byte", used}}, DType::b8, Device::cpu());
  } catch (const MemoryError&) {
    residuals_ = Tensor();
    return false;  // over the host's memory budget (set_memory_budget): recompute instead
  }
  residual_from_ = from;
  residual_steps_ = n;
  // The kept bytes leave x_t out: each reverse step loads it from the scanned tensor first.
  for (size_t k = 0; k < x_load_.size(); ++k)
    if (!x_in_place_[k]) x_unkept_[k] = x_load_back_[k] = 1;
  return true;
}

void StepProgram::save(int64_t s) {
  arena_->save(static_cast<char*>(residuals_.data_ptr()) + static_cast<std::size_t>(s - residual_from_) * arena_->saved());
}

bool StepProgram::restore(int64_t s) {
  if (!keeps(s)) return false;
  arena_->restore(static_cast<const char*>(residuals_.data_ptr()) +
                  static_cast<std::size_t>(s - residual_from_) * arena_->saved());
  return true;
}

bool StepProgram::append_forward(ScalarLoop& loop) const {
  // (x_t or a carry read in place means loop calls or a solve, which no ScalarLoop takes.)
  if (!forward_built_ || any(x_in_place_) || any(carry_moved_)) return false;
  for (const SliceCopy& c : x_load_)
    if (!c.append_to(loop, origin(), dir())) return false;
  return forward_.append_to(loop);
}

bool StepProgram::append_next(ScalarLoop& loop) const {
  if (any(carry_moved_)) return false;
  for (const Tensor& c : carry_) loop.live_out(c.data_ptr());
  return next_built_ && next_.append_to(loop);
}

bool StepProgram::append_backward(ScalarLoop& loop) const {
  for (const Tensor& c : carry_bar_) loop.live_out(c.data_ptr());
  for (size_t k = 0; k < plan_->params().size(); ++k) {
    const Tensor& adj = adjoints_[static_cast<size_t>(plan_->param_var(k))];
    if (adj.defined()) loop.live_out(adj.data_ptr());
  }
  if (!backward_built_ || any(x_load_back_) || any(carry_load_back_) || !seed_.append_to(loop)) return false;
  for (const SliceCopy& c : y_seed_)
    if (!c.append_to(loop, origin(), dir())) return false;
  if (!vjp_.append_to(loop)) return false;
  for (const SliceCopy& c : x_adj_store_)
    if (!c.append_to(loop, origin(), dir())) return false;
  return true;
}

bool StepProgram::append_forward(KernelProgram& program) const {
  if (on_host() || !forward_built_) return false;
  program.append(forward_);
  return true;
}

bool StepProgram::append_next(KernelProgram& program) const {
  if (on_host() || !next_built_) return false;
  program.append(next_);
  return true;
}

bool StepProgram::append_backward(KernelProgram& program) const {
  if (on_host() || !backward_built_) return false;
  program.append(seed_);
  program.append(vjp_);
  return true;
}

void StepProgram::next_carry() {
  if (next_built_) {
    next_.run("scan step", 0);
    return;
  }
  // A new carry that reads a carry buffer (a carry passed on unchanged, swapped, or viewed: the
  // (x_t, x_{t-1}) carries of a second-order recurrence) goes through a staging buffer, copied
  // before any carry buffer is written (hand_on).
  capture_into(next_, [&] {
    std::vector<Tensor> dst(carry_.size()), src(carry_.size());
    for (size_t k = 0; k < carry_.size(); ++k) {
      const PlanRef r = plan_->carry_out()[k];
      if (r.var == static_cast<int32_t>(k) || carry_in_place_[k]) continue;  // (in place: read from its slot)
      dst[k] = carry_[k];
      src[k] = plan_->value(values_, r);
    }
    hand_on(dst, src, carry_);
  });
  next_built_ = true;
  ++forward_gen_;
}

void StepProgram::flush_stores() {
  for (SliceCopy& c : x_adj_store_) c.flush();
}

void StepProgram::finish() const {
  for (const KernelProgram* k : {&forward_, &next_, &seed_, &vjp_}) k->finish("scan step");
}

void StepProgram::prepare_backward(const std::vector<char>& needs, const std::vector<Tensor>& param_adj,
                                   const std::vector<Tensor>& ys_bar, const std::vector<Tensor>& xs_adj,
                                   const std::vector<Tensor>& carry_bar, const Axes& batch) {
  std::vector<char> ys_wanted(ys_bar.size()), xs_wanted(xs_adj.size());
  for (size_t k = 0; k < ys_bar.size(); ++k) ys_wanted[k] = ys_bar[k].defined();
  for (size_t k = 0; k < xs_adj.size(); ++k) xs_wanted[k] = xs_adj[k].defined();
  ys_bar_ = ys_bar;
  xs_adj_ = xs_adj;
  // A reusable program whose reverse programs were built for the same pass keeps them: its own
  // buffers (parameter accumulators, carry cotangents) are reset, the slice copies remade.
  if (reusable_ && backward_built_ && needs == needs_ && batch == batch_ && ys_wanted == built_ys_ &&
      xs_wanted == built_xs_) {
    for (size_t k = 0; k < carry_.size(); ++k) {
      if (carry_bar[k].defined())
        copy_into(carry_bar_[k], carry_bar[k]);
      else
        fill_zero(carry_bar_[k]);
    }
    for (size_t p = 0; p < plan_->params().size(); ++p)
      fill_zero(adjoints_[static_cast<size_t>(plan_->param_var(p))]);
    make_slice_copies();
    return;
  }
  needs_ = needs;
  batch_ = batch;
  built_ys_ = ys_wanted;
  built_xs_ = xs_wanted;
  auto with_batch = [&](const Tensor& t) {
    Axes ax = t.axes();
    for (int i = 0; i < batch.rank(); ++i) ax.push_back(batch[i]);
    return zeros(ax, t.dtype(), t.device());
  };
  backward_built_ = false;
  ++backward_gen_;
  seed_ = KernelProgram();
  vjp_ = KernelProgram();
  adjoints_.assign(plan_->n_vars(), Tensor());
  carry_bar_.clear();
  for (size_t k = 0; k < carry_.size(); ++k) {
    carry_bar_.push_back(with_batch(carry_[k]));
    if (carry_bar[k].defined()) copy_into(carry_bar_.back(), carry_bar[k]);
  }
  for (size_t p = 0; p < param_adj.size(); ++p) {
    const int32_t v = plan_->param_var(p);
    const Tensor& value = plan_->params()[p];
    // A parameter without a wanted gradient still receives its VJP contributions: into scratch.
    // A reusable program always accumulates into its own buffers (add_param_adjoints).
    adjoints_[static_cast<size_t>(v)] =
        param_adj[p].defined() && !reusable_ ? param_adj[p] : with_batch(value);
  }
  x_adj_store_.clear();
  y_seed_.clear();
  y_seed_of_.clear();
  x_adj_of_.clear();
  // The slice copies need the adjoint buffers, which the seed capture allocates: built there.
}

// The slice copies between the adjoint buffers and the stacked cotangents of this pass, as the
// reverse programs' build made them (y_seed_of_, x_adj_of_).
void StepProgram::make_slice_copies() {
  if (rebind_slice_copies()) return;
  y_seed_.clear();
  y_seed_output_.clear();
  x_adj_store_.clear();
  for (size_t k = 0; k < y_seed_of_.size(); ++k)
    if (y_seed_of_[k].first >= 0) {
      y_seed_.emplace_back(adjoints_[static_cast<size_t>(y_seed_of_[k].first)], ys_bar_[k], over_, true,
                           y_seed_of_[k].second, true);
      y_seed_output_.push_back(k);
    }
  // An input's adjoint is staged (held a block at a time, written back by flush_stores) where no
  // other buffer of this pass shares its memory.
  for (size_t k = 0; k < x_adj_of_.size(); ++k) {
    if (x_adj_of_[k] < 0) continue;
    std::vector<Tensor> others(adjoints_.begin(), adjoints_.end());
    for (size_t j = 0; j < xs_adj_.size(); ++j)
      if (j != k && xs_adj_[j].defined()) others.push_back(xs_adj_[j]);
    others.insert(others.end(), carry_bar_.begin(), carry_bar_.end());
    const bool alone = !overlaps(xs_adj_[k], others);
    x_adj_store_.emplace_back(adjoints_[static_cast<size_t>(x_adj_of_[k])], xs_adj_[k], over_, false, true, alone);
  }
}

bool StepProgram::rebind_slice_copies() {
  size_t i = 0, j = 0;
  for (size_t k = 0; k < y_seed_of_.size(); ++k)
    if (y_seed_of_[k].first >= 0 && (i >= y_seed_.size() || !y_seed_[i++].rebind(ys_bar_[k]))) return false;
  for (size_t k = 0; k < x_adj_of_.size(); ++k)
    if (x_adj_of_[k] >= 0 && (j >= x_adj_store_.size() || !x_adj_store_[j++].rebind(xs_adj_[k]))) return false;
  return i == y_seed_.size() && j == x_adj_store_.size();
}

void StepProgram::backward(int64_t s) {
  LoopPositionScope where("scan step", s);
  const bool host = on_host();
  if (backward_built_)
    replay_backward(s);
  else
    build_backward(s);
  if (host)
    for (SliceCopy& c : x_adj_store_) c.run(index(s));
}

// The outputs' cotangents at step s into their adjoints (host), within the ranges of this pass.
void StepProgram::seed_outputs(int64_t s) {
  const int64_t i = index(s);
  if (y_ranges_.empty()) {  // every step's cotangents (the common case)
    for (SliceCopy& c : y_seed_) c.run(i);
    return;
  }
  for (size_t j = 0; j < y_seed_.size(); ++j) {
    const size_t k = y_seed_output_[j];
    if (k < y_ranges_.size() && y_ranges_[k].second >= 0 && (i < y_ranges_[k].first || i >= y_ranges_[k].second)) {
      if (!y_seed_of_[k].second) fill_zero(adjoints_[static_cast<size_t>(y_seed_of_[k].first)]);  // a zero seed
      continue;
    }
    y_seed_[j].run(i);
  }
}

void StepProgram::replay_backward(int64_t s) {
  const bool host = on_host();
  if (host) {
    for (size_t k = 0; k < x_load_.size(); ++k)
      if (x_load_back_[k]) x_load_[k].run(index(s));
    for (size_t k = 0; k < carry_.size(); ++k)
      if (carry_load_back_[k] && carry_slots_[k].defined()) carry_load_[k].run(s);
  }
  seed_.run("scan step", s, s);
  if (host) seed_outputs(s);
  vjp_.run("scan step", s, s);
}

void StepProgram::build_backward(int64_t s) {
  const bool host = on_host();
  // The reverse programs are captured from x_t and the carries in their buffers
  // (read_x_in_place_back then decides how their replays read them).
  if (host) {
    for (size_t k = 0; k < x_load_.size(); ++k)
      if (x_in_place_[k] || x_unkept_[k]) x_load_[k].run(index(s));
    for (size_t k = 0; k < carry_.size(); ++k)
      if (carry_in_place_[k]) carry_load_[k].run(s);
  }
  // Adjoints of every variable that can carry a gradient (views alias their parent's), NOT
  // zeroed: each stays flagged fresh until its first writer, and is zero-filled only where
  // something accumulates into it first (most adjoints are written whole by one rule). Then
  // the cotangent of the carry after this step, and of y_t.
  std::vector<char> fresh(plan_->n_vars(), 0);
  capture_seed(fresh, alias_carry_adjoints());
  plan_slice_copies(fresh);
  if (host) seed_outputs(s);
  capture_vjp(s, fresh);
  if (host) allow_forwarding_back();
  backward_built_ = true;
  ++backward_gen_;
}

// The adjoint of an intermediate handed on as carry k, which this step would start as a copy of
// carry_bar_[k], is carry_bar_[k] itself where it has the same layout: only this step's rules read
// or add to it before the step's last calls write carry_bar_ afresh from the carry inputs'
// adjoints (which are never aliased so: a carry handed on unchanged keeps its copy).
std::vector<char> StepProgram::alias_carry_adjoints() {
  const ScanPlan& p = *plan_;
  std::vector<char> aliased(carry_.size(), 0);
  for (size_t k = 0; k < carry_.size(); ++k) {
    const int32_t v = p.carry_out()[k].var;
    if (v < 0 || !needs_[static_cast<size_t>(v)] || adjoints_[static_cast<size_t>(v)].defined()) continue;
    if (p.var(v).kind != VarKind::op || p.view_parent(v) >= 0) continue;
    const Tensor& bar = carry_bar_[k];
    const Tensor& value = values_[static_cast<size_t>(v)];
    Axes ax = p.var(v).axes;
    for (int i = 0; i < batch_.rank(); ++i) ax.push_back(batch_[i]);
    if (!(ax == bar.axes()) || p.var(v).dtype != bar.dtype() || value.device() != bar.device() ||
        !bar.is_contiguous())
      continue;
    adjoints_[static_cast<size_t>(v)] = bar;
    aliased[k] = 1;
  }
  return aliased;
}

// The seed program: allocates the adjoints and starts those of the new carries from carry_bar_.
void StepProgram::capture_seed(std::vector<char>& fresh, const std::vector<char>& aliased) {
  const ScanPlan& p = *plan_;
  capture_into(seed_, [&] {
    for (size_t v = 0; v < p.n_vars(); ++v)
      if (needs_[v]) p.allocate(values_, adjoints_, static_cast<int32_t>(v), batch_, fresh);
    for (size_t k = 0; k < carry_.size(); ++k) {
      const auto v = static_cast<size_t>(p.carry_out()[k].var);
      if (p.carry_out()[k].var < 0 || !needs_[v] || aliased[k]) continue;
      if (fresh[v]) {
        copy_into(adjoints_[v], carry_bar_[k]);  // same axes: covers it
        fresh[v] = 0;
      } else {
        accumulate(p.adjoint(values_, adjoints_, static_cast<int32_t>(v), batch_, &fresh), carry_bar_[k]);
      }
    }
    for (size_t k = 0; k < ys_bar_.size(); ++k) {
      const auto v = static_cast<size_t>(p.y_out()[k].var);
      if (ys_bar_[k].defined() && p.y_out()[k].var >= 0 && needs_[v] && !fresh[v])
        (void)p.adjoint(values_, adjoints_, static_cast<int32_t>(v), batch_, &fresh);  // zero a fresh parent
    }
  });
}

// Which adjoint each output's cotangent seeds (written where fresh: the slice copy covers it;
// otherwise added to) and which adjoint each input's store reads; then the slice copies.
void StepProgram::plan_slice_copies(std::vector<char>& fresh) {
  const ScanPlan& p = *plan_;
  y_seed_of_.assign(ys_bar_.size(), {-1, false});
  for (size_t k = 0; k < ys_bar_.size(); ++k) {
    const auto v = static_cast<size_t>(p.y_out()[k].var);
    if (!ys_bar_[k].defined() || p.y_out()[k].var < 0 || !needs_[v]) continue;
    y_seed_of_[k] = {p.y_out()[k].var, !fresh[v]};
    fresh[v] = 0;
  }
  x_adj_of_.assign(xs_adj_.size(), -1);
  for (size_t k = 0; k < xs_adj_.size(); ++k)
    if (xs_adj_[k].defined()) x_adj_of_[k] = p.n_carry() + static_cast<int32_t>(k);
  make_slice_copies();
}

// The reverse program: every rule of the step, then the carries' cotangents for the step before
// (zero where no rule wrote one) and the inputs' adjoints.
void StepProgram::capture_vjp(int64_t s, std::vector<char>& fresh) {
  const ScanPlan& p = *plan_;
  const bool host = on_host();
  capture_into(vjp_, [&] {
    if (!host)
      for (SliceCopy& c : y_seed_) c.run_or_record(s, origin(), dir());
    p.backward(values_, adjoints_, needs_, batch_, &fresh);
    for (size_t k = 0; k < carry_.size(); ++k) {
      if (adjoints_[k].defined()) {
        copy_into(carry_bar_[k], p.adjoint(values_, adjoints_, static_cast<int32_t>(k), batch_, &fresh));
      } else {
        fill_zero(carry_bar_[k]);
      }
    }
    for (size_t k = 0; k < xs_adj_.size(); ++k) {
      const auto v = static_cast<int32_t>(p.n_carry() + static_cast<int>(k));
      if (xs_adj_[k].defined()) (void)p.adjoint(values_, adjoints_, v, batch_, &fresh);
    }
    if (!host)
      for (SliceCopy& c : x_adj_store_) c.run_or_record(s, origin(), dir());
  });
}

// Host: only the reverse program reads its temporaries (the reverse rules' scratch), the adjoints
// of the step's intermediates (allocated by the seed program) and those of the carries into the
// step (it copies them into carry_bar_ itself); the adjoints of new carries and outputs (the seed
// program writes them), of inputs x_t and of parameters are read or written elsewhere too.
// Replays may skip or fuse copies into the former (KernelProgram::allow_copy_forwarding).
void StepProgram::allow_forwarding_back() {
  const ScanPlan& p = *plan_;
  std::vector<char> shared(p.n_vars(), 0);
  for (size_t v = 0; v < p.n_vars(); ++v) {
    const VarKind kind = p.var(static_cast<int32_t>(v)).kind;
    shared[v] = kind == VarKind::x || kind == VarKind::param;
  }
  for (const std::vector<PlanRef>* refs : {&p.carry_out(), &p.y_out()})
    for (const PlanRef& r : *refs)
      if (r.var >= 0) shared[static_cast<size_t>(r.var)] = 1;
  BufferSplit b = split_buffers(adjoints_, shared);
  for (const Tensor& t : carry_bar_) b.shared.push_back(t.storage());
  vjp_.allow_copy_forwarding(&seed_, std::move(b.owned), std::move(b.shared));
  read_x_in_place_back();
}

}  // namespace tenax::detail
