// compile: the signature cache (least recently used out), the trace of a new signature, the
// pools of captured programs, and the tape node whose reverse pass replays a captured program.
#include "tenax/autodiff/compile.h"


#include <algorithm>
#include <atomic>
#include <list>
#include <mutex>
#include <thread>

#include "tenax/autodiff/function_program.h"
#include "tenax/autodiff/recording.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/autodiff/tape_impl.h"

namespace tenax {
namespace detail {
namespace {

struct ArgSignature {
  Axes axes;
  DType dtype;
  Device device;
  bool tracked;
  uint16_t shard;  // the sharding (core/distributed.h): a sharded argument traces its own plan
  bool operator==(const ArgSignature& o) const {
    return axes == o.axes && dtype == o.dtype && device == o.device && tracked == o.tracked && shard == o.shard;
  }
  [[nodiscard]] std::string describe() const {
    return axes.describe() + " " + dtype_name(dtype) + " on " + device.str() + (tracked ? ", tracked" : "") +
           (shard != 0 ? ", sharded" : "");
  }
};

struct Signature {
  std::vector<ArgSignature> args;
  std::vector<Name> mapped;
  bool forward_mode = false;  // recorded on a forward-mode tape (jvp, forward jacobian)
  bool operator==(const Signature& o) const {
    return args == o.args && mapped == o.mapped && forward_mode == o.forward_mode;
  }
};

// Whether this thread records on a forward-mode tape (it keeps every residual).
bool forward_mode_tape() {
  const auto* tape = dynamic_cast<const TapeImpl*>(g_record_state.recorder);
  return tape != nullptr && tape->keeps_all();
}

Signature signature_of(const std::vector<Tensor>& args) {
  Signature s;
  s.forward_mode = forward_mode_tape();
  for (const Tensor& a : args) s.args.push_back({a.axes(), a.dtype(), a.device(), is_tracked(a), a.shard_id()});
  for (int i = 0; i < g_mapped.size(); ++i) s.mapped.push_back(g_mapped[i]);
  return s;
}

// What `now` changes from `then`, in words.
std::string difference(const Signature& then, const Signature& now) {
  if (now.args.size() != then.args.size())
    return std::to_string(now.args.size()) + " arguments where it had " + std::to_string(then.args.size());
  for (size_t k = 0; k < now.args.size(); ++k)
    if (!(now.args[k] == then.args[k]))
      return "argument " + std::to_string(k) + " is " + now.args[k].describe() + " where it was " +
             then.args[k].describe();
  if (now.forward_mode != then.forward_mode)
    return now.forward_mode ? "the call is recorded for forward mode (jvp), the traced one was not"
                            : "the call is not recorded for forward mode (jvp), the traced one was";
  return "the axes mapped by the enclosing nmap/map differ";
}

}  // namespace

/// One traced signature: its plan, and the sets of buffers and programs not in use.
struct CompiledEntry {
  Signature sig;
  std::shared_ptr<const ScanPlan> plan;  // null when f runs op by op (eager)
  bool eager = false;  // f calls what a trace cannot hold (scan, map, custom_vjp, a transfer)
  std::mutex mutex;
  std::vector<std::unique_ptr<FunctionProgram>> idle;

  std::unique_ptr<FunctionProgram> take() {
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.empty()) return nullptr;
    std::unique_ptr<FunctionProgram> p = std::move(idle.back());
    idle.pop_back();
    return p;
  }
  // Keeps at most one idle set per hardware thread (more were only wanted by calls held at once).
  void give(std::unique_ptr<FunctionProgram> p) {
    static const size_t keep = std::max<size_t>(2, std::thread::hardware_concurrency());
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.size() < keep) idle.push_back(std::move(p));
  }
};

namespace {

/// The call on a tape: holds its set of buffers (the reverse pass reads the call's values) until
/// the tape lets go.
class CompiledNode final : public CustomNode {
 public:
  CompiledNode(const std::string& name, std::shared_ptr<CompiledEntry> entry, std::unique_ptr<FunctionProgram> p)
      : name_(name), entry_(std::move(entry)), program_(std::move(p)), mapped_(g_mapped) {}
  ~CompiledNode() override { entry_->give(std::move(program_)); }
  CompiledNode(const CompiledNode&) = delete;
  CompiledNode& operator=(const CompiledNode&) = delete;

  [[nodiscard]] const char* name() const override { return name_.c_str(); }
  void vjp(const std::vector<Tensor>& cotangents, const std::vector<Tensor>& adjoints) override {
    const MappedScope scope(mapped_, MappedScope::replace);
    program_->backward(cotangents, adjoints);
  }
  [[nodiscard]] int64_t residual_bytes() const override { return program_->bytes(); }
  [[nodiscard]] bool batched_vjp() const override { return true; }
  bool jvp(const std::vector<Tensor>& tangents, const Axes& batch, std::vector<Tensor>& out) override {
    const MappedScope scope(mapped_, MappedScope::replace);
    out = program_->tangent(tangents, batch);
    return true;
  }

 private:
  std::string name_;
  std::shared_ptr<CompiledEntry> entry_;
  std::unique_ptr<FunctionProgram> program_;
  AxisList mapped_;
};

}  // namespace

class CompiledState {
 public:
  CompiledState(CompiledFunction::Fn f, CompileOptions o) : f_(std::move(f)), opt_(std::move(o)) {
    where_ = "[" + opt_.name + "]";
    traced_what_ = opt_.name == "compiled function" ? opt_.name : "compiled function '" + opt_.name + "'";
    if (!f_) throw Error(where_ + " compile needs a function");
    if (opt_.cache_size < 1)
      throw Error(where_ + " cache_size must be at least 1, got " + std::to_string(opt_.cache_size));
  }

  std::vector<Tensor> call(const std::vector<Tensor>& args) {
    for (size_t k = 0; k < args.size(); ++k)
      if (!args[k].defined()) throw Error(where_ + " argument " + std::to_string(k) + " is undefined");
    // Inside a trace the enclosing scan body or compiled function compiles the ops.
    if (g_record_state.trace) {
      ++inlined_;
      return checked(f_(args));
    }
    const Signature sig = signature_of(args);
    std::shared_ptr<CompiledEntry> e = find(sig);
    const bool traced = !e;
    if (traced) e = trace(sig, args);
    if (e->eager) {
      ++eager_;
      return checked(f_(args));
    }
    if (!traced) ++replays_;
    std::unique_ptr<FunctionProgram> p = e->take();
    if (!p) {
      p = std::make_unique<FunctionProgram>(e->plan, args, sig.forward_mode);
      ++programs_;
    }
    // A program whose run fails is dropped (its capture may be unfinished); a later call makes another.
    std::vector<Tensor> out = p->forward(args);
    for (size_t k = 0; k < out.size(); ++k) out[k] = with_shard(out[k], e->plan->y_shards()[k]);
    bool tracked = false;
    for (const ArgSignature& a : sig.args) tracked = tracked || a.tracked;
    if (!tracked) {
      e->give(std::move(p));
      return out;
    }
    auto node = std::make_shared<CompiledNode>(opt_.name, e, std::move(p));
    g_record_state.recorder->record_custom(std::move(node), args, out);
    return out;
  }

  [[nodiscard]] CompileStats stats() const {
    return {traces_.load(), replays_.load(), programs_.load(), inlined_.load(), eager_.load()};
  }

 private:
  std::vector<Tensor> checked(std::vector<Tensor> out) const {
    if (out.empty()) throw Error(where_ + " the function returned no tensors");
    for (size_t k = 0; k < out.size(); ++k)
      if (!out[k].defined()) throw Error(where_ + " the function's output " + std::to_string(k) + " is undefined");
    return out;
  }

  // The entry for `sig`, moved to the front; null when none is kept.
  std::shared_ptr<CompiledEntry> find(const Signature& sig) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if ((*it)->sig == sig) {
        if (it != lru_.begin()) lru_.splice(lru_.begin(), lru_, it);
        return lru_.front();
      }
    return nullptr;
  }

  std::shared_ptr<CompiledEntry> trace(const Signature& sig, const std::vector<Tensor>& args) {
    check_trace_allowed(sig);
    auto e = std::make_shared<CompiledEntry>();
    e->sig = sig;
    std::vector<Tensor> no_carry, y;
    try {
      LoopPositionScope where(opt_.name.c_str(), 0);
      e->plan = ScanPlan::trace(
          [this](const std::vector<Tensor>&, const std::vector<Tensor>& x) {
            return std::make_pair(std::vector<Tensor>{}, checked(f_(x)));
          },
          {}, args, g_record_state.recorder ? g_record_state.serial : 0, no_carry, y, traced_what_.c_str(), true);
    } catch (const Untraceable&) {
      // A scan (its step compiled and kept between calls by the scan body cache), map, custom_vjp
      // or transfer inside f: f runs op by op for this signature.
      e->eager = true;
    }
    if (e->plan && !e->plan->params().empty())
      throw AutodiffError(where_ + " the function reads a tensor " + e->plan->params()[0].axes().describe() +
                          " that the tape tracks but that is not among its arguments; pass it as an argument "
                          "(a closed-over tensor is a constant of the compiled function, and its gradient would be lost)");
    ++traces_;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::shared_ptr<CompiledEntry>& kept : lru_)
      if (kept->sig == sig) return kept;  // another thread traced it meanwhile
    lru_.push_front(e);
    if (opt_.max_traces >= 0) traced_.push_back(sig);
    if (lru_.size() > static_cast<size_t>(opt_.cache_size)) lru_.pop_back();
    return e;
  }

  void check_trace_allowed(const Signature& sig) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (opt_.max_traces < 0 || traces_.load() < opt_.max_traces) return;
    std::string why = traced_.empty() ? "" : "; " + difference(traced_.back(), sig);
    throw Error(where_ + " a call would trace the function again but max_traces is " +
                std::to_string(opt_.max_traces) + why);
  }

  CompiledFunction::Fn f_;
  CompileOptions opt_;
  std::string where_, traced_what_;
  std::mutex mutex_;
  std::list<std::shared_ptr<CompiledEntry>> lru_;  // most recently used first
  std::vector<Signature> traced_;                  // with max_traces: the signatures traced, in order
  std::atomic<int64_t> traces_{0}, replays_{0}, programs_{0}, inlined_{0}, eager_{0};
};

}  // namespace detail

CompiledFunction::CompiledFunction(Fn f, CompileOptions options)
    : state_(std::make_shared<detail::CompiledState>(std::move(f), std::move(options))) {}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& args) const { return state_->call(args); }

CompileStats CompiledFunction::stats() const { return state_->stats(); }

CompiledFunction compile(CompiledFunction::Fn f, CompileOptions options) {
  return CompiledFunction(std::move(f), std::move(options));
}

}  // namespace tenax
