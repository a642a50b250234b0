// A scan's reverse pass: from checkpoints every k steps (the steps recomputed per chunk) or by
// recursive bisection under a memory budget, fused into scalar loops or device programs where the
// step allows; and the forward loop's fused form, which scan.cpp runs.
#include "tenax/autodiff/scan_run.h"

#include <algorithm>
#include <cmath>

#include "tenax/autodiff/recording.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/scalar_loop.h"

namespace tenax::detail {

const Name kCheckpointAxis("__scan_checkpoint");

namespace {

// The sweeps whose fused loops a reusable program keeps between calls (StepProgram::keep_loop).
enum LoopRole : int { kForward, kForwardStoringCarries, kChunkForwards, kChunkBackwards };

// A fused loop (ScalarLoop) of what `build` appends, simplified; null when fusion is off or the
// step does not fuse. A reused program gives back the loop an earlier call kept for `role`, moved
// onto this call's `stacked` tensors, where it can; else the loop is built, and simplified as p
// simplified the same loop before where it did (a reused program's loops differ from call to call
// only in where the stacked tensors lie). Call it once the programs it replays are built
// (StepProgram::built).
template <class Build>
std::unique_ptr<ScalarLoop> fuse(StepProgram& p, int role, const std::vector<Tensor>& stacked, Build build) {
  if (!scalar_loops_enabled()) return nullptr;
  if (std::unique_ptr<ScalarLoop> kept = p.take_loop(role, stacked)) return kept;
  auto loop = std::make_unique<ScalarLoop>();
  if (!build(*loop)) return nullptr;
  for (const ScalarLoop& done : p.simplified_loops())
    if (loop->simplify_as(done)) return loop;
  loop->simplify();
  p.remember_simplified(*loop);
  return loop;
}

// Appends the loads (or stores) of `slots` at slot index step - offset (ScalarLoop::run).
bool append_slots(ScalarLoop& loop, const std::vector<SliceCopy>& copies) {
  for (const auto& c : copies)
    if (!c.append_to(loop, 0, 1, true)) return false;
  return true;
}

}  // namespace

ScanRun::~ScanRun() {
  if (!entry || !complete || !program || !program->built(false)) return;
  if (auto c = cache.lock()) {
    program->release_call();
    entry->program = std::move(program);
    c->give(std::move(entry));
  }
}

int64_t ScanRun::residual_bytes() const {
  int64_t b = 0;
  for (const Tensor& t : checkpoints) b += bytes_of(t);
  return b + (program ? program->residual_bytes() : 0);
}

StepProgram& ScanRun::compiled() {
  if (!program)
    program = std::make_unique<StepProgram>(plan, init, xs, over, opt.reverse, steps, entry != nullptr);
  return *program;
}

ScanRun::CarrySlots::CarrySlots(const std::vector<Tensor>& slots, const std::vector<Tensor>& carry,
                                const std::vector<char>* no_store, const std::vector<char>* no_load) {
  for (size_t k = 0; k < carry.size(); ++k) {
    if (!no_load || !(*no_load)[k]) load.emplace_back(carry[k], slots[k], kCheckpointAxis, true, false);
    if (!no_store || !(*no_store)[k]) store.emplace_back(carry[k], slots[k], kCheckpointAxis, false, false);
  }
}

ScanRun::CarrySlots::CarrySlots(StepProgram& p, int role, const std::vector<Tensor>& slots,
                                const std::vector<Tensor>& carry, const std::vector<char>* no_store,
                                const std::vector<char>* no_load) {
  // The kept copies serve where they are these copies, in this order (rebound in place: a
  // SliceCopy is large to move).
  std::vector<SliceCopy> kept[2] = {p.take_copies(2 * role), p.take_copies(2 * role + 1)};
  size_t next[2] = {0, 0};
  bool fits = true;
  for (size_t k = 0; k < carry.size() && fits; ++k)
    for (int which : {0, 1}) {
      const std::vector<char>* skip = which == 0 ? no_load : no_store;
      if (!fits || (skip && (*skip)[k])) continue;
      std::vector<SliceCopy>& from = kept[which];
      const size_t n = next[which]++;
      fits = n < from.size() && from[n].fixed().data_ptr() == carry[k].data_ptr() &&
             from[n].into_fixed() == (which == 0) && from[n].rebind(slots[k]);
    }
  if (fits && next[0] == kept[0].size() && next[1] == kept[1].size()) {
    load = std::move(kept[0]);
    store = std::move(kept[1]);
    return;
  }
  *this = CarrySlots(slots, carry, no_store, no_load);
}

void ScanRun::CarrySlots::keep(StepProgram& p, int role) {
  p.keep_copies(2 * role, std::move(load));
  p.keep_copies(2 * role + 1, std::move(store));
}

std::vector<Tensor> ScanRun::new_slots(int64_t n) const {
  std::vector<Tensor> out;
  for (const Tensor& t : init) {
    Axes ax{{kCheckpointAxis, n}};
    const Axes& carry_axes = plan->var(static_cast<int32_t>(out.size())).axes;
    for (int i = 0; i < carry_axes.rank(); ++i) ax.push_back(carry_axes[i]);
    out.push_back(empty(ax, t.dtype(), t.device()));
  }
  return out;
}

// The program's carry goes from step a to step b.
void ScanRun::advance(int64_t a, int64_t b) {
  StepProgram& p = compiled();
  if (!advance_tried_ && p.built(false)) {
    advance_tried_ = true;
    advance_loop_ = fuse(p, -1, {}, [&](ScalarLoop& l) { return p.append_forward(l) && p.append_next(l); });
  }
  if (advance_loop_) {
    advance_loop_->run(a, b - a, 1);
    return;
  }
  for (int64_t s = a; s < b; ++s) {
    p.forward(s);
    p.next_carry();
  }
}

// Steps b-1 .. a backwards from the carry into step a (in the program's carry), keeping
// snapshots in slots depth, depth+1, ... of `snap` (recursive bisection).
void ScanRun::reverse_range(CarrySlots& snap, int64_t a, int64_t b, int64_t depth) {
  StepProgram& p = compiled();
  if (b - a == 1) {
    if (leaf_loop_) {
      leaf_loop_->run(a, 1, 1);
      return;
    }
    p.forward(a);
    p.backward(a);
    leaf_loop_ = fuse(p, -1, {}, [&](ScalarLoop& l) { return p.append_forward(l) && p.append_backward(l); });
    return;
  }
  const int64_t m = a + (b - a) / 2;
  snap.from_carry(depth);
  advance(a, m);
  reverse_range(snap, m, b, depth + 1);
  snap.to_carry(depth);
  reverse_range(snap, a, m, depth);
}

bool ScanRun::fused_forward(CarrySlots& ck, bool store_ck, const std::vector<SliceCopy>& y_store,
                            int64_t from) {
  StepProgram& p = compiled();
  if (!p.on_host()) return device_forward(ck, store_ck, y_store, from);
  const int64_t k = opt.checkpoint_every;
  const bool ck_inside = store_ck && k == 1;
  std::vector<Tensor> stacked;
  p.add_stacked(stacked, false);
  for (const auto& c : y_store) stacked.push_back(c.whole());
  if (ck_inside)
    for (const auto& c : ck.store) stacked.push_back(c.whole());
  const int role = ck_inside ? kForwardStoringCarries : kForward;
  auto loop = fuse(p, role, stacked, [&](ScalarLoop& l) {
    if (ck_inside)
      for (const auto& c : ck.store)
        if (!c.append_to(l, 0, 1)) return false;
    if (!p.append_forward(l)) return false;
    for (const auto& c : y_store)
      if (!c.append_to(l, p.origin(), p.dir())) return false;
    return p.append_next(l);
  });
  if (!loop) return false;
  for (int64_t s = from; s < steps;) {
    int64_t end = steps;
    if (store_ck && !ck_inside) {
      if (s % k == 0) ck.from_carry(s / k);
      end = std::min(steps, (s / k + 1) * k);
    }
    loop->run(s, end - s, 1);
    s = end;
  }
  p.keep_loop(role, stacked, std::move(loop), false);
  return true;
}

// On a device, fused_forward's steps as one program per step (CUDA: one graph launch per step):
// the checkpoint (every carry kept), x_t, the step, y_t and the next carry. False when device
// fusion is off (TENAX_CUDA_FUSION=0: then the step's programs replay one by one).
bool ScanRun::device_forward(CarrySlots& ck, bool store_ck, const std::vector<SliceCopy>& y_store,
                             int64_t from) {
  StepProgram& p = compiled();
  if (!cuda_fusion_enabled()) return false;
  const int64_t k = opt.checkpoint_every;
  const bool ck_inside = store_ck && k == 1;
  KernelProgram step;
  if (ck_inside)
    for (const auto& c : ck.store) c.append_to(step, 0, 1);
  if (!p.append_forward(step)) return false;
  for (const auto& c : y_store) c.append_to(step, p.origin(), p.dir());
  if (!p.append_next(step)) return false;
  for (int64_t s = from; s < steps; ++s) {
    if (store_ck && !ck_inside && s % k == 0) ck.from_carry(s / k);
    step.run("scan step", s, s);
  }
  return true;
}

// The reverse sweep from checkpoints every k steps (k = 1: every carry). Per chunk [c, e): the
// carry at c from its checkpoint, the steps c..e-2 recomputed forwards storing each carry in a
// segment slot, then steps e-1..c backwards, each from its slot. The first chunk builds the
// reverse programs step by step; the others run as fused loops when the step fuses (the reverse
// loop's recomputation trimmed to what the reverse rules read).
void ScanRun::reverse_chunks(CarrySlots& ck, int64_t k) {
  StepProgram& p = compiled();
  CarrySlots segment;
  if (k > 1) segment = CarrySlots(new_slots(k), p.carry());
  // With k = 1 the checkpoints are the slots (slot index = step); else the segment (step - c).
  CarrySlots& slots = k > 1 ? segment : ck;
  ReverseLoops loops;
  for (int64_t c = ((steps - 1) / k) * k; c >= 0; c -= k) {
    const int64_t e = std::min(c + k, steps);
    if ((loops.device || loops.fused) && !ranges_.empty()) zero_outside_ranges();
    if (loops.device) {
      for (int64_t s = c; s >= 0; --s) loops.device->run("scan step", s, s);
      break;
    }
    if (loops.fused && k == 1) {  // every remaining step in one run, each from its checkpoint
      loops.backwards->run(c, c + 1, -1);
      break;
    }
    ck.to_carry(c / k);  // a kept step's too: restore() puts back all but the carries
    if (k == 1 && p.restore(c)) {  // the step's intermediates as the forward pass kept them
      p.backward(c);
    } else {
      if (loops.fused) {
        loops.forwards->run(c, e - 1 - c, 1, c);
        segment.from_carry(e - 1 - c);
        loops.backwards->run(e - 1, e - c, -1, c);
        continue;
      }
      reverse_chunk_step_by_step(segment, c, e);
    }
    if (loops.tried || !p.built(true)) continue;  // built(true) fails while no chunk needed a next carry
    loops.tried = true;
    build_reverse_loops(loops, slots, segment, k);
  }
  p.keep_loop(kChunkForwards, loops.stacked, std::move(loops.forwards), false);
  p.keep_loop(kChunkBackwards, loops.stacked, std::move(loops.backwards), true);
}

// Chunk [c, e) from the carry at c: steps c..e-2 recomputed forwards, each carry stored in the
// segment, then steps e-1..c backwards, each from its slot.
void ScanRun::reverse_chunk_step_by_step(CarrySlots& segment, int64_t c, int64_t e) {
  StepProgram& p = compiled();
  for (int64_t s = c; s + 1 < e; ++s) {
    segment.from_carry(s - c);
    p.forward(s);
    p.next_carry();
  }
  for (int64_t s = e - 1; s >= c; --s) {
    if (s + 1 < e) segment.to_carry(s - c);
    p.forward(s);
    p.backward(s);
  }
}

// Once the programs are built: on a device, one program per step (k = 1, fusion on); on the
// host, the fused scalar loops where the step fuses (the reverse loop's recomputation trimmed to
// what the reverse rules read).
void ScanRun::build_reverse_loops(ReverseLoops& loops, CarrySlots& slots, CarrySlots& segment, int64_t k) {
  StepProgram& p = compiled();
  if (!p.on_host()) {
    if (k != 1 || !cuda_fusion_enabled()) return;
    loops.device = std::make_unique<KernelProgram>();
    for (const auto& l : slots.load) l.append_to(*loops.device, 0, 1);
    if (!p.append_forward(*loops.device) || !p.append_backward(*loops.device)) loops.device.reset();
    return;
  }
  for (const CarrySlots* c : {&slots, &segment})
    for (const std::vector<SliceCopy>* copies : {&c->load, &c->store})
      for (const SliceCopy& copy : *copies) loops.stacked.push_back(copy.whole());
  p.add_stacked(loops.stacked, true);
  if (k > 1)
    loops.forwards = fuse(p, kChunkForwards, loops.stacked, [&](ScalarLoop& l) {
      return append_slots(l, segment.store) && p.append_forward(l) && p.append_next(l);
    });
  if (k == 1 || loops.forwards)
    loops.backwards = fuse(p, kChunkBackwards, loops.stacked, [&](ScalarLoop& l) {
      return append_slots(l, slots.load) && p.append_forward(l) && p.append_backward(l);
    });
  loops.fused = loops.backwards != nullptr;
}

// Axes of the adjoints beyond their inputs' own (several VJPs at once: jacobian), read off the
// first adjoint asked for (init, xs, then params).
Axes ScanRun::batch_axes(const std::vector<Tensor>& adj) const {
  const size_t nc = init.size(), nx = xs.size();
  Axes batch;
  for (size_t k = 0; k < adj.size(); ++k)
    if (adj[k].defined()) {
      const Tensor& value = k < nc ? init[k] : k < nc + nx ? xs[k - nc] : plan->params()[k - nc - nx];
      for (int i = 0; i < adj[k].rank(); ++i)
        if (!value.has_axis(adj[k].axes().name(i)) && !batch.contains(adj[k].axes().name(i)))
          batch.push_back(adj[k].axes()[i]);
      break;
    }
  return batch;
}

bool ScanRun::accept_cotangent_ranges(const std::vector<CotangentRange>& ranges) {
  for (size_t k = 0; k < ranges.size(); ++k)
    if (!ranges[k].whole() && (k < init.size() || ranges[k].axis != over)) return false;
  ranges_ = ranges;
  return true;
}

void ScanRun::zero_outside_ranges() {
  const size_t nc = init.size();
  for (size_t k = nc; k < ranges_.size(); ++k) {
    const CotangentRange& r = ranges_[k];
    const Tensor& bar = ys_bar_[k - nc];
    if (r.whole() || !bar.defined()) continue;
    if (r.lo > 0) fill_zero(slice(bar, over, 0, r.lo));
    if (r.hi < steps) fill_zero(slice(bar, over, r.hi));
  }
  ranges_.clear();
  if (program) program->set_y_ranges({});
}

// The host's step-by-step replays seed within the ranges; bisection's and devices' loops read
// every step's cotangent (zeroed outside first).
void ScanRun::use_ranges(const std::vector<Tensor>& ys_bar) {
  ys_bar_ = ys_bar;
  if (ranges_.empty()) return;
  StepProgram& p = compiled();
  if (bisection || !p.on_host()) {
    zero_outside_ranges();
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> y;
  for (size_t k = init.size(); k < ranges_.size(); ++k) y.emplace_back(ranges_[k].lo, ranges_[k].hi);
  p.set_y_ranges(std::move(y));
}

void ScanRun::vjp(const std::vector<Tensor>& cot, const std::vector<Tensor>& adj) {
  PauseRecording pause;
  const size_t nc = init.size(), nx = xs.size();
  const auto nc_ = static_cast<std::ptrdiff_t>(nc), nx_ = static_cast<std::ptrdiff_t>(nx);
  const std::vector<Tensor> carry_bar(cot.begin(), cot.begin() + nc_), ys_bar(cot.begin() + nc_, cot.end());
  const std::vector<Tensor> xs_adj(adj.begin() + nc_, adj.begin() + nc_ + nx_),
      param_adj(adj.begin() + nc_ + nx_, adj.end());
  std::vector<char> x_needs(nx);
  for (size_t k = 0; k < nx; ++k) x_needs[k] = xs_adj[k].defined();
  StepProgram& p = compiled();
  p.prepare_backward(plan->needs_grad(x_needs), param_adj, ys_bar, xs_adj, carry_bar, batch_axes(adj));
  // The ranges offered serve this pass only, however it ends.
  struct PassEnd {
    ScanRun& run;
    ~PassEnd() {
      run.ranges_.clear();
      run.ys_bar_.clear();
      if (run.program) run.program->set_y_ranges({});
    }
  } pass_end{*this};
  use_ranges(ys_bar);
  if (bisection) {
    const auto depth = static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(steps)))) + 1;
    CarrySlots snap(new_slots(depth), p.carry());
    p.set_carry(init);
    leaf_loop_.reset();
    reverse_range(snap, 0, steps, 0);
    leaf_loop_.reset();
  } else {
    // Carries read in place from their slots, and carries the reverse pass never reads, are not
    // loaded from their checkpoints.
    std::vector<char> no_load(nc);
    for (size_t k = 0; k < nc; ++k)
      no_load[k] = p.carry_in_place(k) || (k < unneeded.size() && unneeded[k]) ? 1 : 0;
    CarrySlots ck(p, kSlotsReverse, checkpoints, p.carry(), nullptr, &no_load);
    reverse_chunks(ck, opt.checkpoint_every);
    ck.keep(p, kSlotsReverse);
  }
  p.flush_stores();
  p.finish();
  if (entry) p.add_param_adjoints(param_adj);  // a reusable program accumulates into its own
  for (size_t k = 0; k < nc; ++k)
    if (adj[k].defined()) accumulate(adj[k], p.carry_bar()[k]);
}

}  // namespace tenax::detail
