// map: chunks along one axis run one after another (each through nmap), written into stacked
// outputs; reverse mode is a tape node that recomputes each chunk on its own tape.
#include "tenax/autodiff/map.h"

#include <algorithm>
#include <mutex>

#include <tbb/parallel_for.h>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/tape.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/capture.h"

namespace tenax {
namespace {

// Runs while a rematerialised chunk is computed: an op reading a tensor the enclosing tape tracks
// means f closed over it, and its gradient would be lost.
class ClosureGuard final : public detail::Recorder {
 public:
  void record(const OpDef& op, Inputs, const Attrs&, Tensor&) override {
    throw Error(std::string("[map] f closes over a tensor the tape tracks (read by '") + op.name +
                "'); pass it through map's args so its gradient is computed");
  }
  void record_custom(std::shared_ptr<detail::CustomNode> node, const std::vector<Tensor>&,
                     std::vector<Tensor>&) override {
    throw Error(std::string("[map] f closes over a tensor the tape tracks (read by '") + node->name() +
                "'); pass it through map's args so its gradient is computed");
  }
};

class GuardScope {
 public:
  GuardScope(detail::Recorder* r, uint32_t outer) : previous_(detail::g_record_state) {
    detail::g_record_state = {r, outer, 0, false};
  }
  ~GuardScope() { detail::restore_record_state(previous_); }
  GuardScope(const GuardScope&) = delete;
  GuardScope& operator=(const GuardScope&) = delete;

 private:
  detail::RecordState previous_;
};

std::vector<Tensor> chunk_args(const std::vector<Tensor>& args, Name over, int64_t s, int64_t e) {
  std::vector<Tensor> c;
  for (const Tensor& a : args) c.push_back(a.has_axis(over) ? slice(a, over, s, e) : a);
  return c;
}

// Runs body(s, e) for the chunks [start, steps) of `batch` slices, up to `parallel` at a time on
// oneTBB workers that see the caller's mapped axes.
template <class Body>
void for_chunks(int64_t start, int64_t steps, int64_t batch, int64_t parallel, const Body& body) {
  const int64_t n = steps <= start ? 0 : 1 + (steps - start - 1) / batch;
  parallel = std::min(parallel, n);
  if (parallel <= 1 || n <= 1) {
    for (int64_t c = 0; c < n; ++c) body(start + c * batch, std::min(start + (c + 1) * batch, steps));
    return;
  }
  const AxisList mapped = detail::g_mapped;
  for (int64_t g = 0; g < n; g += parallel)
    tbb::parallel_for(g, std::min(g + parallel, n), [&](int64_t c) {
      // The worker (or the caller, which runs tasks too) sees exactly the caller's mapped axes.
      detail::MappedScope same(mapped, detail::MappedScope::replace);
      body(start + c * batch, std::min(start + (c + 1) * batch, steps));
    });
}

struct MapRun final : detail::CustomNode {
  MultiFunction f;
  Name over;
  std::vector<Tensor> args;
  int64_t steps = 0, batch = 0, parallel = 1;

  const char* name() const override { return "map"; }
  int64_t residual_bytes() const override { return 0; }

  // Forward mode, chunk by chunk: f's outputs' tangents on each chunk (through nmap, on a tape of
  // its own), written into the stacked tangents.
  bool jvp(const std::vector<Tensor>& tangents, const Axes& extra, std::vector<Tensor>& out) override {
    out.clear();
    for_chunks(0, steps, batch, 1, [&](int64_t s, int64_t e) {
      Tape tape;
      tape.keep_all_residuals();
      std::vector<Tensor> in = chunk_args(args, over, s, e), watched, tan;
      for (size_t i = 0; i < in.size(); ++i)
        if (tangents[i].defined()) {
          in[i] = tape.watch(in[i]);
          watched.push_back(in[i]);
          tan.push_back(tangents[i].has_axis(over) ? slice(tangents[i], over, s, e) : tangents[i]);
        }
      std::vector<Tensor> outs = nmap(f, {over}, in);
      out.resize(outs.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        const Tensor t = tape.forward_tangent(outs[k], watched, tan);
        detail::PauseRecording pause;
        if (!out[k].defined()) {
          Axes ax;
          for (int i = 0; i < t.rank(); ++i) ax.push_back({t.axes().name(i), t.axes().name(i) == over ? steps : t.axes().size(i)});
          out[k] = zeros(ax, t.dtype(), t.device());
        }
        detail::copy_into(slice(out[k], over, s, e), t);
      }
    });
    (void)extra;  // the tangents carry their batch axes through f's ops
    return true;
  }

  void vjp(const std::vector<Tensor>& cot, const std::vector<Tensor>& adj) override {
    std::mutex shared;  // arguments without `over` receive contributions from every chunk
    for_chunks(0, steps, batch, parallel, [&](int64_t s, int64_t e) {
      Tape tape;
      std::vector<Tensor> in = chunk_args(args, over, s, e), watched;
      std::vector<size_t> which;
      for (size_t i = 0; i < in.size(); ++i)
        if (adj[i].defined()) {
          in[i] = tape.watch(in[i]);
          watched.push_back(in[i]);
          which.push_back(i);
        }
      std::vector<Tensor> outs = nmap(f, {over}, in);
      // Σ_k Re(conj(cotangent_k) · output_k): its gradient is the VJP (docs/complex.md), in each
      // output's own dtype.
      Tensor loss;
      for (size_t k = 0; k < outs.size(); ++k) {
        if (!cot[k].defined()) continue;
        const Tensor c = slice(cot[k], over, s, e);
        const Tensor term = is_complex(c.dtype()) ? astype(sum(real(outs[k] * conj(c))), DType::f64)
                                                  : astype(sum(outs[k] * c), DType::f64);
        loss = loss.defined() ? loss + term : term;
      }
      if (!loss.defined()) return;
      std::vector<Tensor> g = tape.gradient(loss, watched);
      detail::PauseRecording pause;
      for (size_t j = 0; j < which.size(); ++j) {
        const Tensor& a = adj[which[j]];
        if (a.has_axis(over)) {
          detail::accumulate(slice(a, over, s, e), g[j]);
        } else {
          std::lock_guard<std::mutex> lock(shared);
          detail::accumulate(a, g[j]);
        }
      }
    });
  }
};

}  // namespace

namespace {

// The options and arguments checked; the mapped axis's size.
int64_t check_map(Name over, const std::vector<Tensor>& args, const MapOptions& o) {
  // Its chunks run on untracked copies of the arguments: a trace would record none of their ops
  // and replay the first call's results as constants.
  if (detail::g_record_state.trace)
    detail::refuse_in_trace("map", "is not supported yet; use nmap there (it vectorises the same way) or run the "
                                   "map outside");
  if (o.batch_size < 0) throw Error("[map] batch_size must be >= 0, got " + std::to_string(o.batch_size));
  if (o.memory_budget < 0) throw Error("[map] memory_budget must be >= 0 bytes");
  if (o.parallel_chunks < 1) throw Error("[map] parallel_chunks must be >= 1, got " + std::to_string(o.parallel_chunks));
  int64_t steps = -1;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!args[k].defined()) throw Error("[map] argument " + std::to_string(k) + " is undefined");
    if (!args[k].has_axis(over)) continue;
    if (steps >= 0 && args[k].size(over) != steps)
      throw ShapeError("[map] axis '" + over.str() + "' has size " + std::to_string(steps) + " in an earlier argument but " +
                       std::to_string(args[k].size(over)) + " in argument " + std::to_string(k) + " " +
                       args[k].axes().describe());
    steps = args[k].size(over);
  }
  if (steps < 0) throw AxisError("[map] no argument has the mapped axis '" + over.str() + "'");
  if (steps == 0) throw ShapeError("[map] the axis '" + over.str() + "' is empty");
  return steps;
}

// One call of map: chunks run through nmap, their results stacked (or, recorded without
// rematerialisation, joined at the end), and with rematerialisation one MapRun recorded.
class MapCall {
 public:
  MapCall(const MultiFunction& f, Name over, const std::vector<Tensor>& args, const MapOptions& o)
      : f_(f), over_(over), args_(args), o_(o), steps_(check_map(over, args, o)),
        outer_(detail::g_record_state.recorder), outer_serial_(detail::g_record_state.serial) {
    bool record = false;
    for (const Tensor& a : args) record |= detail::is_tracked(a);
    record_ = record && outer_ != nullptr;
    remat_ = record_ && o.rematerialize;
    // Chunks recorded on the tape (no rematerialisation) are joined at the end; otherwise each is
    // copied into the stacked outputs as it comes and dropped, and computed on plain values under a
    // guard (an op reading a tensor the tape tracks would lose its gradient in the copy).
    keep_chunks_ = record_ && !remat_;
    plain_ = args;
    for (Tensor& t : plain_) detail::TensorAccess::set_var(t, -1, 0);
    strip_sharding_along_over();
  }

  std::vector<Tensor> run() {
    int64_t batch = o_.batch_size > 0 ? o_.batch_size : steps_;
    int64_t start = 0;
    if (o_.batch_size == 0 && o_.memory_budget > 0) {
      batch = batch_from_one_slice();
      start = 1;
    }
    // A batch past the axis is the whole axis (and keeps the chunk arithmetic within int64 for any
    // batch_size or memory_budget).
    batch = std::min(batch, std::max<int64_t>(steps_, 1));
    if (keep_chunks_ || start == 0) {
      // The first chunk runs here: it fixes the stacked outputs' shapes (and is the only place
      // recorded chunks may run).
      const int64_t e = std::min(start + batch, steps_);
      keep(run_chunk(start, e), start, e);
      start = e;
    }
    const int64_t parallel = keep_chunks_ ? 1 : o_.parallel_chunks;
    for_chunks(start, steps_, batch, parallel, [&](int64_t s, int64_t e) {
      std::vector<Tensor> part = run_chunk(s, e);
      detail::PauseRecording pause;
      keep(part, s, e);
    });
    if (keep_chunks_) return joined();
    for (Tensor& t : outs_) t = sharded_like_args(t);
    if (remat_) record(batch);
    return outs_;
  }

 private:
  // Mapping over a sharded axis runs the chunks of this rank's block: the chunks slice plain local
  // tensors; the recorded node keeps the sharded arguments (so that replicated ones are reduced
  // over ranks in the reverse sweep) and the outputs are sharded again.
  void strip_sharding_along_over() {
    for (const Tensor& a : args_)
      if (a.shard_id() != 0 && detail::sharding_of(a.shard_id()).axis == over_) shard_ = a.shard_id();
    if (shard_ == 0) return;
    if (keep_chunks_)
      throw Error("[map] over the sharded axis '" + over_.str() +
                  "' records its chunks only through rematerialisation (rematerialize = true, the default)");
    for (Tensor& t : plain_)
      if (t.shard_id() == shard_) detail::TensorAccess::set_shard(t, 0);
  }
  [[nodiscard]] Tensor sharded_like_args(const Tensor& t) const {
    for (const Tensor& a : args_)
      if (a.shard_id() != 0 && t.has_axis(detail::sharding_of(a.shard_id()).axis))
        return detail::with_shard(t, a.shard_id());
    return t;
  }

  std::vector<Tensor> run_chunk(int64_t s, int64_t e) {
    detail::LoopPositionScope where("the map chunk starting at slice", s);
    detail::DeviceLoopScope loop;  // device waits here cost one round trip per chunk: warned
    if (keep_chunks_) return nmap(f_, {over_}, chunk_args(args_, over_, s, e));
    if (!outer_) return nmap(f_, {over_}, chunk_args(plain_, over_, s, e));
    GuardScope scope(&guard_, outer_serial_);
    return nmap(f_, {over_}, chunk_args(plain_, over_, s, e));
  }

  void keep(const std::vector<Tensor>& part, int64_t s, int64_t e) {
    if (keep_chunks_) {
      recorded_.push_back(part);
      return;
    }
    if (outs_.empty())
      for (const Tensor& p : part) {
        Axes ax{{over_, steps_}};
        for (int i = 0; i < p.rank(); ++i)
          if (p.axes().name(i) != over_) ax.push_back(p.axes()[i]);
        outs_.push_back(empty(ax, p.dtype(), p.device()));
      }
    for (size_t k = 0; k < part.size(); ++k) detail::copy_into(slice(outs_[k], over_, s, e), part[k]);
  }

  // Runs slice 0 measuring the peak bytes allocated while computing it (results and temporaries):
  // the batch the memory budget allows.
  int64_t batch_from_one_slice() {
    detail::AllocationMeter meter;
    detail::AllocationMeter* previous = detail::g_meter;
    detail::g_meter = &meter;
    std::vector<Tensor> first;
    try {
      first = run_chunk(0, 1);
    } catch (...) {
      detail::g_meter = previous;
      throw;
    }
    detail::g_meter = previous;
    keep(first, 0, 1);
    return std::max<int64_t>(1, o_.memory_budget / std::max<int64_t>(meter.peak, 1));
  }

  std::vector<Tensor> joined() const {
    std::vector<Tensor> out;
    for (size_t k = 0; k < recorded_.front().size(); ++k) {
      std::vector<Tensor> pieces;
      for (const auto& part : recorded_) pieces.push_back(part[k]);
      out.push_back(pieces.size() == 1 ? pieces[0] : concat(pieces, over_));
    }
    return out;
  }

  void record(int64_t batch) {
    auto run = std::make_shared<MapRun>();
    run->f = f_;
    run->over = over_;
    run->args = plain_;  // untracked: the backward chunks watch them on their own tapes (any thread)
    run->steps = steps_;
    run->batch = batch;
    run->parallel = o_.parallel_chunks;
    outer_->record_custom(run, args_, outs_);
  }

  const MultiFunction& f_;
  Name over_;
  const std::vector<Tensor>& args_;
  const MapOptions& o_;
  int64_t steps_;
  detail::Recorder* outer_;
  uint32_t outer_serial_;
  bool record_ = false, remat_ = false, keep_chunks_ = false;
  uint16_t shard_ = 0;  // the sharding of `over`, where an argument is sharded along it
  std::vector<Tensor> plain_, outs_;
  std::vector<std::vector<Tensor>> recorded_;
  ClosureGuard guard_;
};

}  // namespace

std::vector<Tensor> map(const MultiFunction& f, Name over, const std::vector<Tensor>& args, const MapOptions& o) {
  return MapCall(f, over, args, o).run();
}

}  // namespace tenax
