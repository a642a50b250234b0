// scan: validation, the forward loop over a traced plan, carry checkpoints (and, within a budget,
// the steps' intermediates), recorded on the enclosing tape as a ScanRun whose reverse pass is in
// scan_run.cpp; the reuse of a plan and compiled step kept from an earlier call, by a model's
// named captures (scan_cached) or by a plain scan's body type and traced step (reuse_by_plan;
// autodiff/scan_cache.h).
#include "tenax/autodiff/scan.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <typeindex>
#include <unordered_map>
#include <utility>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/scan_blocked.h"
#include "tenax/autodiff/scan_run.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/core/ops.h"

namespace tenax {
namespace {

using detail::kCheckpointAxis;
using detail::ScanPlan;
using detail::ScanRun;

}  // namespace

detail::ScanCache::ScanCache() = default;

detail::ScanCache::~ScanCache() = default;

std::shared_ptr<detail::ScanCache> detail::scan_body_cache(const std::type_info& body_type) {
  static std::mutex mutex;
  static std::unordered_map<std::type_index, std::shared_ptr<ScanCache>> caches;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<ScanCache>& c = caches[std::type_index(body_type)];
  if (!c) c = std::make_shared<ScanCache>();
  return c;
}

std::unique_ptr<detail::ScanCache::Entry> detail::ScanCache::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(entry_);
}

void detail::ScanCache::give(std::unique_ptr<Entry> e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!entry_) entry_ = std::move(e);
}

namespace {

void check_carry(const std::vector<Tensor>& init, const std::vector<Tensor>& out, int64_t step) {
  if (out.size() != init.size())
    throw ShapeError("[scan] the body returned " + std::to_string(out.size()) + " carries at step " +
                     std::to_string(step) + " but init has " + std::to_string(init.size()));
  for (size_t k = 0; k < init.size(); ++k)
    if (!out[k].axes().same_set(init[k].axes()) || out[k].dtype() != init[k].dtype())
      throw ShapeError("[scan] carry " + std::to_string(k) + " changes from " + init[k].axes().describe() + " " +
                       dtype_name(init[k].dtype()) + " to " + out[k].axes().describe() + " " +
                       dtype_name(out[k].dtype()) + " at step " + std::to_string(step) +
                       "; a carry keeps its axes, sizes and dtype");
}

// `init` broadcast to the mapped axes `extra`, laid out dense in the order `like` (the carry the
// step returns), so that step 0 reads its carry as every later step does.
// `shard`: the sharding of the traced step's carry (a mapped axis picked up may be sharded).
Tensor widened(const Tensor& init, const Axes& extra, const Axes& like, uint16_t shard) {
  // The mapped axes are physically there; broadcasting to them is nmap's own business.
  detail::MappedScope none(AxisList{}, detail::MappedScope::replace);
  const Tensor out = contiguous(transpose(broadcast(init, extra), like.names()));
  return shard != 0 && out.has_axis(detail::sharding_of(shard).axis) ? detail::with_shard(out, shard) : out;
}

// Broadcasts init[k] to the mapped (nmap) axes that out[k] has and init[k] lacks, in out[k]'s
// order; a carry widened before (`was`) whose step returned another order is laid out again. True
// when any init changed (the step is then traced again). Other differences are left for
// check_carry to report.
bool widen_to_mapped(std::vector<Tensor>& init, const std::vector<Tensor>& out, std::vector<bool>& was) {
  bool any = false;
  was.resize(init.size(), false);
  for (size_t k = 0; k < init.size() && k < out.size(); ++k) {
    if (was[k] && init[k].axes().same_set(out[k].axes()) && !(init[k].axes() == out[k].axes())) {
      init[k] = widened(init[k], Axes{}, out[k].axes(), out[k].shard_id());
      any = true;
      continue;
    }
    Axes extra;
    bool only_mapped = out[k].dtype() == init[k].dtype();
    for (int i = 0; i < out[k].rank(); ++i) {
      const Axis a = out[k].axes()[i];
      if (init[k].has_axis(a.name)) continue;
      only_mapped = only_mapped && detail::g_mapped.contains(a.name);
      extra.push_back(a);
    }
    for (int i = 0; i < init[k].rank(); ++i) only_mapped = only_mapped && out[k].has_axis(init[k].axes().name(i));
    if (extra.rank() == 0 || !only_mapped) continue;
    init[k] = widened(init[k], extra, out[k].axes(), out[k].shard_id());
    was[k] = any = true;
  }
  return any;
}

// The checks every scan call makes before it runs; returns the number of steps.
int64_t check_scan(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                   const ScanOptions& options) {
  if (detail::g_record_state.trace)
    detail::refuse_in_trace("scan", "is not supported yet; run it outside");
  if (options.checkpoint_every < 1)
    throw Error("[scan] checkpoint_every must be >= 1, got " + std::to_string(options.checkpoint_every));
  if (options.memory_budget < 0) throw Error("[scan] memory_budget must be >= 0 bytes");
  int64_t steps = options.length;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].defined()) throw Error("[scan] xs " + std::to_string(k) + " is undefined");
    if (!xs[k].has_axis(over))
      throw AxisError("[scan] xs " + std::to_string(k) + " " + xs[k].axes().describe() + " has no axis '" + over.str() +
                      "' to scan over");
    const int64_t n = xs[k].size(over);
    if (steps >= 0 && n != steps)
      throw ShapeError("[scan] xs " + std::to_string(k) + " " + xs[k].axes().describe() + " has " + std::to_string(n) +
                       " steps along '" + over.str() + "' but " +
                       (k == 0 ? "options.length is " : "xs 0 has ") + std::to_string(steps));
    steps = n;
  }
  if (steps < 0) throw Error("[scan] with no xs, set options.length to the number of steps");
  if (steps == 0) throw ShapeError("[scan] the axis '" + over.str() + "' has no steps");
  for (size_t k = 0; k < init.size(); ++k) {
    if (!init[k].defined()) throw Error("[scan] init carry " + std::to_string(k) + " is undefined");
    if (!is_inexact(init[k].dtype()))
      throw DTypeError("[scan] init carry " + std::to_string(k) + " is " + dtype_name(init[k].dtype()) +
                       "; carries are float64, float32, complex128 or complex64");
  }

  return steps;
}

// The axes, dtype and sharding of each tensor; on_host becomes false when one is elsewhere.
std::vector<std::tuple<Axes, DType, uint16_t>> shapes(const std::vector<Tensor>& ts, bool& on_host) {
  std::vector<std::tuple<Axes, DType, uint16_t>> out;
  for (const Tensor& t : ts) {
    out.emplace_back(t.axes(), t.dtype(), t.shard_id());
    on_host = on_host && t.device().kind == Device::Kind::cpu;
  }
  return out;
}

// Whether `t` is a variable of the tape with serial `outer` (what a scan plan makes a parameter).
bool tracked_by(const Tensor& t, uint32_t outer) {
  return outer != 0 && t.var() >= 0 && t.tape_serial() == outer;
}

// The entry a call with these arguments may reuse: the same axes, dtypes, steps, options and nmap
// axes, all on the host, the same captures tracked, and the untracked ones holding the same values.
bool matches(const detail::ScanCache::Entry& e, const std::vector<Tensor>& init,
             const std::vector<Tensor>& xs, Name over, int64_t steps, const ScanOptions& o,
             const std::vector<Tensor>& captures, uint32_t outer) {
  const ScanOptions& k = e.opt;
  if (e.over != over || e.steps != steps || k.reverse != o.reverse ||
      k.checkpoint_every != o.checkpoint_every || k.memory_budget != o.memory_budget ||
      k.residual_budget != o.residual_budget || k.length != o.length)
    return false;
  bool on_host = true;
  if (shapes(init, on_host) != e.init_shapes || shapes(xs, on_host) != e.x_shapes ||
      shapes(captures, on_host) != e.capture_shapes || !on_host)
    return false;
  const AxisList& mapped = detail::g_mapped;
  if (static_cast<size_t>(mapped.size()) != e.mapped.size()) return false;
  for (int i = 0; i < mapped.size(); ++i)
    if (!(mapped[i] == e.mapped[static_cast<size_t>(i)])) return false;
  for (size_t i = 0; i < captures.size(); ++i) {
    const Tensor& c = captures[i];
    const bool tracked = tracked_by(c, outer);
    if (tracked != static_cast<bool>(e.tracked[i])) return false;
    if (tracked) continue;
    const Tensor now = c.is_contiguous() ? c : detail::copy_of(c);
    const size_t bytes = static_cast<size_t>(now.numel()) * itemsize(now.dtype());
    if (bytes != 0 && std::memcmp(now.data_ptr(), e.fixed[i].data_ptr(), bytes) != 0) return false;
  }
  return true;
}

// A new entry for a traced run, or null when the plan cannot be reused: a tensor off the host, or a
// parameter that is not among the captures.
std::unique_ptr<detail::ScanCache::Entry> new_entry(const ScanRun& run, const std::vector<Tensor>& init,
                                                    const std::vector<Tensor>& captures, uint32_t outer) {
  auto e = std::make_unique<detail::ScanCache::Entry>();
  bool on_host = true;
  e->init_shapes = shapes(init, on_host);
  e->x_shapes = shapes(run.xs, on_host);
  e->capture_shapes = shapes(captures, on_host);
  if (!on_host) return nullptr;
  for (const Tensor& p : run.plan->params()) {
    int found = -1;
    for (size_t i = 0; i < captures.size() && found < 0; ++i)
      if (captures[i].var() == p.var() && captures[i].tape_serial() == p.tape_serial())
        found = static_cast<int>(i);
    if (found < 0) return nullptr;
    e->param_capture.push_back(found);
  }
  e->plan = run.plan;
  e->over = run.over;
  e->steps = run.steps;
  e->opt = run.opt;
  for (const Tensor& c : captures) {
    const bool tracked = tracked_by(c, outer);
    e->tracked.push_back(tracked);
    e->fixed.push_back(tracked ? Tensor() : detail::copy_of(c));
  }
  for (int i = 0; i < detail::g_mapped.size(); ++i) e->mapped.push_back(detail::g_mapped[i]);
  for (size_t k = 0; k < init.size(); ++k) {
    Axes extra;
    const Tensor& w = run.init[k];
    for (int i = 0; i < w.rank(); ++i)
      if (!init[k].has_axis(w.axes().name(i))) extra.push_back(w.axes()[i]);
    e->widen.push_back(extra);
    e->widened_axes.push_back(w.axes());
  }
  return e;
}

// Where a carry's new value is also an output (the same variable of the plan: a simulation that
// returns its state every step), its checkpoint at step s > 0 is output s - 1: one buffer of
// steps + 1 slots holds the initial carry then the outputs; the output is a view of slots 1..steps,
// the checkpoints (every k-th carry) a view of slots 0, k, 2k, ... So the forward pass stores
// each such carry once, not twice, and the tape keeps no second copy. Forward scans on the host
// only (a reverse scan stores its outputs from the end). Fills ys_pre[j] for the outputs that
// back a carry and returns per carry its checkpoint tensor (undefined: a buffer of its own).
std::vector<Tensor> shared_checkpoints(const ScanPlan& plan, const std::vector<Tensor>& init, Name over,
                                       int64_t steps, int64_t k, bool reverse, std::vector<Tensor>& ys_pre,
                                       std::vector<Tensor>& slots) {
  std::vector<Tensor> ck(init.size());
  ys_pre.assign(plan.y_out().size(), Tensor());
  slots.assign(init.size(), Tensor());
  if (reverse) return ck;
  detail::PauseRecording pause;
  const int64_t n_ck = (steps + k - 1) / k;
  for (size_t c = 0; c < init.size(); ++c) {
    const int32_t v = plan.carry_out()[c].var;
    if (v < 0 || init[c].device().kind != Device::Kind::cpu) continue;
    for (size_t j = 0; j < plan.y_out().size(); ++j) {
      if (plan.y_out()[j].var != v || ys_pre[j].defined()) continue;
      const detail::PlanVar& var = plan.var(v);
      Axes ax{{over, steps + 1}};
      for (int i = 0; i < var.axes.rank(); ++i) ax.push_back(var.axes[i]);
      const Tensor buf = empty(ax, var.dtype, init[c].device());
      ys_pre[j] = slice(buf, over, 1, steps + 1);
      slots[c] = buf;
      ck[c] = rename(slice(buf, over, 0, (n_ck - 1) * k + 1, k), over, kCheckpointAxis);
      break;
    }
  }
  return ck;
}

// One call of scan: the steps run forwards (traced, then replayed) and, when anything is tracked,
// the ScanRun recorded for the reverse pass. Each phase is a member; run() calls them in order.
class ScanCall {
 public:
  ScanCall(const ScanBody& body, const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
           const ScanOptions& options, const std::vector<Tensor>* captures,
           const std::shared_ptr<detail::ScanCache>* cache, const detail::BlockOf* block = nullptr)
      : body_(body), init_(init), xs_(xs), over_(over), options_(options), captures_(captures), cache_(cache),
        block_(block),
        steps_(check_scan(init, xs, over, options)), run_(std::make_shared<ScanRun>()),
        outer_(detail::g_record_state.recorder), outer_serial_(outer_ ? detail::g_record_state.serial : 0) {
    run_->init = init;
    run_->xs = xs;
    run_->over = over;
    run_->steps = steps_;
    run_->opt = options;
  }

  ScanResult run() {
    if (cache_) reuse_cached();
    replay_all_ = run_->program != nullptr;
    carry_ = init_;
    if (!replay_all_) trace_first_step();
    if (block_ && block_->local && !run_->plan->local_along(*block_->local)) {
      rejected_ = true;
      return {};
    }
    record_ = decide_recording();
    if (record_) plan_residuals();
    {
      detail::PauseRecording pause;
      const int64_t first = replay_all_ ? start_replayed() : run_traced_steps();
      if (steps_ > first) replay_steps(first);
    }
    run_->complete = true;
    return result();
  }

  /// The step is not local along the block's axis (BlockOf::local): nothing ran.
  [[nodiscard]] bool rejected() const { return rejected_; }

 private:
  // A call through a ScanCache whose kept plan and program fit: no trace, every step replayed.
  void reuse_cached() {
    std::unique_ptr<detail::ScanCache::Entry> e = (*cache_)->take();
    if (!e || !matches(*e, init_, xs_, over_, steps_, options_, *captures_, outer_serial_)) {
      (*cache_)->count(false);
      return;
    }
    (*cache_)->count(true);
    run_->plan = e->plan;
    run_->program = std::move(e->program);
    for (size_t k = 0; k < init_.size(); ++k)
      if (e->widen[k].rank() > 0)
        run_->init[k] = widened(init_[k], e->widen[k], e->widened_axes[k], e->plan->carry_shards()[k]);
    for (int i : e->param_capture) run_->params.push_back((*captures_)[static_cast<size_t>(i)]);
    run_->program->rebind(xs_, run_->params);
    run_->entry = std::move(e);
    run_->cache = *cache_;
  }

  // Step 0 traced into the plan (again with a widened init where the carry picks up mapped axes).
  void trace_first_step() {
    {
      detail::LoopPositionScope where("scan step", 0);
      run_->plan = ScanPlan::trace(body_, carry_, x_at(0), outer_serial_, next_, y_);
    }
    // Inside nmap, a carry may pick up mapped axes from xs or closed-over tensors (an init shared by
    // every slice, updated per slice): the init is broadcast to them and step 0 traced again.
    // Traced again until the widened carries come back in the order they went in (a carry's
    // axis order follows its inputs' through the step).
    std::vector<bool> widened_before;
    for (int round = 0; round < 4 && widen_to_mapped(run_->init, next_, widened_before); ++round) {
      carry_ = run_->init;
      detail::LoopPositionScope where("scan step", 0);
      run_->plan = ScanPlan::trace(body_, carry_, x_at(0), outer_serial_, next_, y_);
    }
    check_carry(run_->init, next_, 0);
    run_->params = run_->plan->params();
    if (cache_ && steps_ > 2) {
      run_->entry = new_entry(*run_, init_, *captures_, outer_serial_);
      run_->cache = *cache_;
    } else if (!cache_ && steps_ > 2) {
      reuse_by_plan();
    }
  }

  // A plain scan: the compiled step of an earlier call of the same body (the same callable type)
  // is reused when this call's step-0 plan is the same as its plan (ScanPlan::same_as: the same
  // op calls, attributes, wiring and constants' values) and the axes, dtypes, steps and options
  // match; the parameters (tracked tensors the body closes over) are this call's. Otherwise this
  // call's program is kept for the next.
  void reuse_by_plan() {
    std::shared_ptr<detail::ScanCache> c = detail::scan_body_cache(body_.target_type());
    std::unique_ptr<detail::ScanCache::Entry> e = c->take();
    const std::vector<Tensor>& params = run_->params;
    if (e && e->program && e->plan->same_as(*run_->plan) &&
        matches(*e, init_, xs_, over_, steps_, options_, params, outer_serial_)) {
      c->count(true);
      run_->plan = e->plan;
      run_->program = std::move(e->program);
      run_->program->rebind(xs_, params);
      run_->entry = std::move(e);
      reused_ = true;
    } else {
      c->count(false);
      run_->entry = new_entry(*run_, init_, params, outer_serial_);
    }
    run_->cache = c;
  }

  [[nodiscard]] bool decide_recording() const {
    bool record = !run_->params.empty() || (block_ && block_->tracked);
    for (const Tensor& t : run_->init) record |= detail::is_tracked(t);
    for (const Tensor& t : xs_) record |= detail::is_tracked(t);
    return record && outer_ != nullptr;
  }

  // What the forward pass keeps for the reverse one: bisection under a tight memory budget, else
  // checkpoints every k steps (in an output's buffer where a carry is also an output) and up to
  // residual_budget_ bytes of the steps' intermediates.
  void plan_residuals() {
    const std::vector<Tensor>& init_w = run_->init;
    // A checkpoint interval past the length is one checkpoint (and keeps the arithmetic below
    // within int64 for any option).
    run_->opt.checkpoint_every = std::min(run_->opt.checkpoint_every, std::max<int64_t>(steps_, 1));
    int64_t carry_bytes = 0;
    for (const Tensor& t : init_w) carry_bytes += detail::bytes_of(t);
    int64_t all_carries = 0;  // carry_bytes * steps, saturated
    if (__builtin_mul_overflow(carry_bytes, steps_, &all_carries)) all_carries = INT64_MAX;
    const int64_t own = options_.memory_budget > 0 ? options_.memory_budget - all_carries
                        : options_.residual_budget < 0 ? INT64_MAX
                                                        : options_.residual_budget;
    residual_budget_ = std::min(own, outer_->residual_room());  // the tape's budget, shared by its scans
    if (options_.memory_budget > 0 && all_carries > options_.memory_budget) {
      plan_bisection(carry_bytes);
      return;
    }
    if (options_.memory_budget > 0) run_->opt.checkpoint_every = 1;
    const int64_t n_ck = (steps_ + run_->opt.checkpoint_every - 1) / run_->opt.checkpoint_every;
    run_->checkpoints = shared_checkpoints(*run_->plan, init_w, over_, steps_, run_->opt.checkpoint_every,
                                           options_.reverse, ys_pre_, carry_slots_);
    for (size_t c = 0; c < init_w.size(); ++c) {
      ck_in_ys_.push_back(run_->checkpoints[c].defined() ? 1 : 0);
      if (run_->checkpoints[c].defined()) continue;
      const Tensor& t = init_w[c];
      Axes ax{{kCheckpointAxis, n_ck}};
      for (int i = 0; i < t.rank(); ++i) ax.push_back(t.axes()[i]);
      run_->checkpoints[c] = empty(ax, t.dtype(), t.device());
    }
  }

  void plan_bisection(int64_t carry_bytes) {
    const int64_t slots = options_.memory_budget / std::max<int64_t>(carry_bytes, 1);
    const auto need = static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(steps_)))) + 1;
    if (slots < need)
      throw MemoryError("[scan] memory_budget " + std::to_string(options_.memory_budget) + " bytes holds " +
                        std::to_string(slots) + " carries of " + std::to_string(carry_bytes) + " bytes; " +
                        std::to_string(steps_) + " steps need at least " + std::to_string(need) + " (" +
                        std::to_string(need * carry_bytes) + " bytes)");
    run_->bisection = true;
  }

  // A cached call: the program replays from step 0.
  int64_t start_replayed() {
    carry_ = run_->init;
    return 0;
  }

  // Steps 0 and 1 of a traced call: step 0's results stored, step 1 traced again and checked to
  // run the same ops. Returns the first step the compiled program runs.
  int64_t run_traced_steps() {
    checkpoint(carry_, 0);
    store_y(y_, 0);
    carry_ = next_;
    if (steps_ <= 1 || reused_) return 1;
    checkpoint(carry_, 1);
    std::shared_ptr<const ScanPlan> again;
    {
      detail::LoopPositionScope where("scan step", 1);
      again = ScanPlan::trace(body_, carry_, x_at(1), outer_serial_, next_, y_);
    }
    const std::string diff = run_->plan->difference(*again);
    if (!diff.empty())
      throw Error("[scan] the body ran different ops at step 1 than at step 0 (" + diff +
                  "); a scan body must run the same ops every step: branch with where(), not with C++ control "
                  "flow on values or on the step");
    check_carry(run_->init, next_, 1);
    store_y(y_, 1);
    carry_ = next_;
    return 2;
  }

  // The steps from `first` replay the kernels of the plan (captured at step 2 of a traced run) on
  // fixed buffers, storing checkpoints, kept intermediates and outputs as they go.
  void replay_steps(int64_t first) {
    detail::StepProgram& p = run_->compiled();
    p.set_carry(carry_);
    p.read_carries_from(carry_slots_, over_);
    const bool store_ck = record_ && !run_->bisection;
    const int64_t k = run_->opt.checkpoint_every;
    // ck stores every carry (step 0); ck_new not those an output's store fills (steps > 0).
    ScanRun::CarrySlots ck, ck_new;
    if (store_ck) {
      const std::vector<char> needed = run_->plan->carries_needed_backward();
      run_->unneeded.assign(needed.size(), 0);
      std::vector<char> skip_new = ck_in_ys_;
      for (size_t c = 0; c < needed.size(); ++c) {
        run_->unneeded[c] = needed[c] ? 0 : 1;
        skip_new[c] = skip_new[c] || run_->unneeded[c];
      }
      ck = ScanRun::CarrySlots(p, detail::kSlotsForward, run_->checkpoints, p.carry(), &run_->unneeded);
      ck_new = ScanRun::CarrySlots(p, detail::kSlotsForwardNew, run_->checkpoints, p.carry(), &skip_new);
    }
    std::vector<detail::SliceCopy> y_store;
    bool keep = false;
    for (int64_t s = first; s < steps_; ++s) {
      if (s == first + 1) {
        if (run_->fused_forward(ck_new, store_ck, y_store, s)) break;
        // Steps that do not fuse (more than single elements): with every carry stored, the
        // reverse pass reads each step's intermediates instead of recomputing the step, where
        // they fit the budget (ScanOptions::residual_budget).
        keep = store_ck && k == 1 && p.keep_residuals(residual_budget_, s);
        if (keep) outer_->take_residual_room(p.residual_bytes());
      }
      // Kept steps' carries too: restore() puts back all but the carries (keep_read_buffers).
      if (store_ck && s % k == 0) (s == 0 ? ck : ck_new).from_carry(s / k);
      const bool kept = keep && p.keeps(s);
      p.forward(s);
      if (s == first)
        for (size_t j = 0; j < run_->plan->y_out().size(); ++j) {
          if (replay_all_) ys_.push_back(stacked(j, p.y(j)));
          y_store.emplace_back(p.y(j), ys_[j], over_, false, false);
        }
      if (kept) p.save(s);
      for (auto& c : y_store) c.run(run_->index(s));
      p.next_carry();
    }
    p.finish();
    p.load_carries(steps_);
    for (size_t j = 0; j < carry_.size(); ++j) carry_[j] = detail::copy_of(p.carry()[j]);
    ck.keep(p, detail::kSlotsForward);
    ck_new.keep(p, detail::kSlotsForwardNew);
  }

  // The final carry and the stacked outputs; recorded as one node when anything is tracked.
  ScanResult result() {
    ScanResult result{carry_, ys_};
    // Sharded where the traced step's results were (a stacked output keeps its sharded axis).
    for (size_t k = 0; k < result.carry.size(); ++k)
      result.carry[k] = detail::with_shard(result.carry[k], run_->plan->carry_shards()[k]);
    for (size_t k = 0; k < result.ys.size(); ++k)
      result.ys[k] = detail::with_shard(result.ys[k], run_->plan->y_shards()[k]);
    if (!record_) return result;
    if (block_ && block_->run_out) {  // one node for all blocks, recorded by scan_in_blocks
      *block_->run_out = run_;
      return result;
    }
    std::vector<Tensor> inputs = run_->init, outputs = result.carry;
    inputs.insert(inputs.end(), xs_.begin(), xs_.end());
    inputs.insert(inputs.end(), run_->params.begin(), run_->params.end());
    outputs.insert(outputs.end(), result.ys.begin(), result.ys.end());
    outer_->record_custom(run_, inputs, outputs);
    result.carry.assign(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(init_.size()));
    result.ys.assign(outputs.begin() + static_cast<std::ptrdiff_t>(init_.size()), outputs.end());
    return result;
  }

  [[nodiscard]] std::vector<Tensor> x_at(int64_t s) const {
    std::vector<Tensor> x;
    for (const Tensor& t : xs_) x.push_back(select(t, over_, run_->index(s)));
    return x;
  }

  // Output j's stacked tensor, for a step's output t: the one made with a carry's checkpoints,
  // or a buffer of its own.
  [[nodiscard]] Tensor stacked(size_t j, const Tensor& t) const {
    if (j < ys_pre_.size() && ys_pre_[j].defined()) return ys_pre_[j];
    if (block_ && block_->ys_into && j < block_->ys_into->size()) return (*block_->ys_into)[j];
    Axes ax{{over_, steps_}};
    for (int i = 0; i < t.rank(); ++i) ax.push_back(t.axes()[i]);
    return empty(ax, t.dtype(), t.device());
  }

  void store_y(const std::vector<Tensor>& yt, int64_t s) {
    if (s == 0)
      for (const Tensor& t : yt) ys_.push_back(stacked(ys_.size(), t));
    if (yt.size() != ys_.size())
      throw ShapeError("[scan] the body returned " + std::to_string(yt.size()) + " outputs at step " +
                       std::to_string(s) + " but " + std::to_string(ys_.size()) + " at step 0");
    for (size_t k = 0; k < yt.size(); ++k) detail::copy_into(select(ys_[k], over_, run_->index(s)), yt[k]);
  }

  void checkpoint(const std::vector<Tensor>& c, int64_t s) {
    if (!record_ || run_->bisection || s % run_->opt.checkpoint_every != 0) return;
    for (size_t k = 0; k < c.size(); ++k)
      detail::copy_into(select(run_->checkpoints[k], kCheckpointAxis, s / run_->opt.checkpoint_every), c[k]);
  }

  const ScanBody& body_;
  const std::vector<Tensor>& init_;
  const std::vector<Tensor>& xs_;
  Name over_;
  const ScanOptions& options_;
  const std::vector<Tensor>* captures_;
  const std::shared_ptr<detail::ScanCache>* cache_;
  const detail::BlockOf* block_;
  bool rejected_ = false;
  int64_t steps_;
  std::shared_ptr<ScanRun> run_;
  detail::Recorder* outer_;
  uint32_t outer_serial_;
  bool replay_all_ = false, record_ = false;
  bool reused_ = false;  // reuse_by_plan found a kept program
  int64_t residual_budget_ = 0;  // bytes the forward pass may keep of the steps' intermediates
  std::vector<Tensor> carry_, next_, y_;
  std::vector<Tensor> ys_, ys_pre_;  // ys_pre_: outputs whose buffer holds a carry's checkpoints too
  // Per carry: its checkpoints are a view of an output's stacked buffer (shared_checkpoints),
  // which the forward pass fills through that output, so they are not copied again.
  std::vector<char> ck_in_ys_;
  // Per carry with shared checkpoints: the whole buffer, carry s in slot s (the program may read
  // the carry from it in place: StepProgram::read_carries_from).
  std::vector<Tensor> carry_slots_;
};

ScanResult scan_impl(const ScanBody& body, const std::vector<Tensor>& init, const std::vector<Tensor>& xs,
                     Name over, const ScanOptions& options, const std::vector<Tensor>* captures,
                     const std::shared_ptr<detail::ScanCache>* cache) {
  for (const std::vector<Tensor>* group : {&init, &xs})
    for (const Tensor& t : *group)
      if (t.defined() && t.shard_id() != 0 && detail::sharding_of(t.shard_id()).axis == over)
        throw AxisError("[scan] over the axis '" + over.str() + "', which is sharded across " +
                        std::to_string(detail::sharding_of(t.shard_id()).comm.size()) +
                        " ranks: a scan needs the whole axis on one rank; shard another axis, or gather this one");
  if (!cache) {
    (void)check_scan(init, xs, over, options);  // bad arguments reported before any block is cut
    auto one_block = [&](const std::vector<Tensor>& block_init, const std::vector<Tensor>& block_xs,
                         const detail::BlockOf& block) -> std::optional<ScanResult> {
      ScanCall call(body, block_init, block_xs, over, *block.options, nullptr, nullptr, &block);
      ScanResult r = call.run();
      if (call.rejected()) return std::nullopt;
      return r;
    };
    if (std::optional<ScanResult> r = detail::scan_in_blocks(init, xs, over, options, one_block)) return std::move(*r);
  }
  return ScanCall(body, init, xs, over, options, captures, cache).run();
}

}  // namespace

ScanResult scan(const ScanBody& body, const std::vector<Tensor>& init, const std::vector<Tensor>& xs,
                Name over, const ScanOptions& options) {
  return scan_impl(body, init, xs, over, options, nullptr, nullptr);
}

ScanResult detail::scan_cached(const ScanBody& body, const std::vector<Tensor>& init,
                               const std::vector<Tensor>& xs, Name over, const ScanOptions& options,
                               const std::vector<Tensor>& captures, const std::shared_ptr<ScanCache>& cache) {
  return scan_impl(body, init, xs, over, options, &captures, &cache);
}

}  // namespace tenax
