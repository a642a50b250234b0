// Replaying a captured KernelProgram: the compact replay records, fused device chains and graph
// segments planned at the first run, the run itself, deferred device failures, and programs
// built by appending (core/ops/capture.h). Capturing them is capture.cpp's.
#include "tenax/core/ops/capture.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "tenax/core/env.h"
#include "tenax/core/error.h"

namespace tenax::detail {
namespace {

const char* failure_reason(const char* kernel) {
  const std::string k = kernel;
  if (k == "cholesky") return "is not positive definite";
  if (k == "triangular_solve") return "has a zero on its diagonal";
  return "is singular";
}

// Where a replay failed: "scan step 12", or `what` alone for a position below 0.
std::string replay_position(const char* what, int64_t position) {
  return position < 0 ? std::string(what) : std::string(what) + " " + std::to_string(position);
}

[[noreturn]] void matrix_failure(const char* kernel, int64_t bad, const char* what, int64_t position) {
  throw NumericError(std::string("[") + kernel + "] at " + replay_position(what, position) +
                     ": the matrix at batch index " + std::to_string(bad) + " " + failure_reason(kernel));
}

}  // namespace

bool KernelProgram::append_to(ScalarLoop& loop) const {
  for (const Call& c : calls_) {
    if (!c.flat || c.outer != 1 || c.count != 1 || (!c.one && c.form.kind == ScalarLoop::Kind::call))
      return false;
    const FlatArg* args = &flat_args_[static_cast<size_t>(c.first_arg)];
    ScalarLoop::Ins ins;
    ins.kind = c.form.kind;
    if (ins.kind == ScalarLoop::Kind::call) {
      ins.fn = c.one;
      ins.arity = c.arity;
      for (int a = 0; a < c.arity; ++a) ins.p[a] = args[a].data;
    } else {
      ins.arity = c.form.arity;
      for (int a = 0; a < c.form.arity; ++a) ins.p[a] = args[c.form.operand[a]].data;
    }
    loop.push(ins);
  }
  return true;
}

void KernelProgram::run_calls(size_t begin, size_t end, const char* what, int64_t position,
                              int64_t index) const {
  // Walked by pointer, held in locals: a call may write anywhere, so members would be reloaded
  // per record.
  const Hot* const first = hot_.data();
  const Hot* const last = first + end;
  for (const Hot* at = first + begin; at != last; ++at) {
    const Hot& h = *at;
    if (h.go) {
      h.go->run(*h.go);
      continue;
    }
    if (h.flat) {
      h.flat(h.outer, h.count, h.args);
      continue;
    }
    if (h.chain >= 0) {  // never a flat or planned (host) call
      const auto c = static_cast<size_t>(h.chain);
      real_kernels(1).program.launch_fused(chains_[c].get(), index);
      at = first + chain_end_[c] - 1;
      continue;
    }
    run_record(h, what, position, index);
  }
}

void KernelProgram::matrix_failed(const Hot& h, const char* what, int64_t position) const {
  matrix_failure(calls_[h.call].kernel, 0, what, position);
}

void KernelProgram::run_record(const Hot& h, const char* what, int64_t position, int64_t index) const {
  if (h.mat) {
    if (h.mat->run(*h.mat) >= 0) matrix_failed(h, what, position);
    return;
  }
  const Call& c = calls_[h.call];
  if (c.fn && c.moving >= 0) {
    LoopArg now[8];
    const LoopArg* const a = &args_[static_cast<size_t>(c.first_arg)];
    if (c.base) {  // read_in_place
      std::copy(a, a + c.arity, now);
      now[c.moving].data = const_cast<char*>(c.base->at) + c.offset + index * c.base->stride;
    } else {  // a slice copy (device)
      now[0] = a[0];
      now[1] = a[1];
      now[c.moving].data = static_cast<char*>(now[c.moving].data) + index * c.stride;
    }
    c.fn(c.dims, now);
    return;
  }
  if (c.fn) {
    c.fn(c.dims, &args_[static_cast<size_t>(c.first_arg)]);
    return;
  }
  // read_in_place: the fields it reads its moved operands from, at this index
  for (int t = 0; t < c.touches; ++t)
    if (c.field_base[t])
      *c.field[t] = c.field_base[t]->at + c.field_offset[t] + index * c.field_base[t]->stride;
  const int64_t bad = c.other();
  if (bad >= 0 && c.describe)
    throw NumericError(c.describe(bad) + " at " + replay_position(what, position) +
                       " (finite checks are on: set_check_finite / TENAX_CHECK_FINITE)");
  if (bad >= 0) matrix_failure(c.kernel, bad, what, position);
}

namespace {
thread_local int g_device_loop = 0;
}
DeviceLoopScope::DeviceLoopScope() { ++g_device_loop; }
DeviceLoopScope::~DeviceLoopScope() { --g_device_loop; }

void note_device_wait(const char* op, int device) {
  if (g_device_loop == 0) return;
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(op).second) return;
  std::fprintf(
      stderr,
      "tenax: warning: [%s] copies from cuda:%d to the host (it waits for the device) inside a scan step or "
      "map chunk, so every step pays a round trip; shown once per op\n",
      op, device);
}

bool cuda_graphs_enabled() {
  static const bool on = env_switch("TENAX_CUDA_GRAPHS");
  return on;
}

namespace {
std::atomic<bool>& fusion_flag() {
  static std::atomic<bool> on = env_switch("TENAX_CUDA_FUSION");
  return on;
}
}  // namespace
bool cuda_fusion_enabled() { return fusion_flag().load(std::memory_order_relaxed); }
void set_cuda_fusion(bool on) { fusion_flag().store(on, std::memory_order_relaxed); }

// Runs of two or more device calls that the device can chain (small elementwise calls and
// contractions of one dtype, consecutive in the program) become one fused kernel each; the first
// call's replay record launches it and skips the rest. A moving call (a slice copy) becomes a
// chain even alone, so that a graph can hold it (its index set per launch). A chain the device
// cannot build stays as plain calls.
void KernelProgram::plan_chains() const {
  chains_.clear();
  chain_end_.clear();
  const DeviceProgramFns& fns = real_kernels(1).program;
  if (!fns.fuse || !cuda_fusion_enabled()) return;
  std::vector<ChainCall> run;
  auto key_of = [&](const Call& c, ChainCall& cc) {
    if (!c.graph_safe) return -1;  // a host call, or a device call that does not record
    if (c.fn) {
      cc = {c.fn, &c.dims, &args_[static_cast<size_t>(c.first_arg)], nullptr, 0, c.moving, c.stride};
    } else if (c.device_dot >= 0) {
      cc = {nullptr, nullptr, nullptr, &device_dots_[static_cast<size_t>(c.device_dot)], c.dtype, -1, 0};
    } else {
      return -1;
    }
    return fns.chain_key(cc);
  };
  for (size_t k = 0; k < calls_.size();) {
    ChainCall first;
    const int key = key_of(calls_[k], first);
    if (key < 0 && !(calls_[k].moving >= 0 && calls_[k].graph_safe)) {
      ++k;
      continue;
    }
    run.assign(1, first);
    size_t e = k + 1;
    for (ChainCall cc; key >= 0 && e < calls_.size() && key_of(calls_[e], cc) == key; ++e) run.push_back(cc);
    // The run in chains of what fits one (a call that fits none stays plain; a moving call too
    // large for a chain gets a launch of its own that a graph can move, DeviceProgramFns::fuse).
    for (size_t at = 0; at < run.size();) {
      size_t taken = 0;
      void* chain = nullptr;
      try {
        chain = fns.fuse(run.data() + at, run.size() - at, &taken, calls_[k + at].near);
      } catch (const DeviceError&) {
        break;
      }
      if (chain) {
        chains_.emplace_back(chain, fns.destroy_fused);
        hot_[k + at].chain = static_cast<int16_t>(chains_.size() - 1);
        chain_end_.push_back(k + at + taken);
        if (chains_.size() == INT16_MAX) return;  // the rest plain
      }
      at += std::max<size_t>(taken, 1);
    }
    k = e;
  }
}

// Planned at the first run: the compact replay records, fused device chains, graph segments and
// (host programs that allow it) copy forwarding.
void KernelProgram::plan_segments() const {
  planned_ = true;
  hot_.clear();
  inline_.clear();
  auto is_inline = [](const Call& c) { return c.flat && c.form.kind != ScalarLoop::Kind::call; };
  inline_.reserve(static_cast<size_t>(std::count_if(calls_.begin(), calls_.end(), is_inline)));
  for (size_t k = 0; k < calls_.size(); ++k) {
    const Call& c = calls_[k];
    const FlatArg* args = c.flat ? &flat_args_[static_cast<size_t>(c.first_arg)] : nullptr;
    const InlineCall* inl = nullptr;
    if (is_inline(c)) {
      const InlineCall ic = resolve_form(c.form, args, c.outer, c.count);
      if (ic.run) {  // every inline form has one; otherwise the flat kernel runs
        inline_.push_back(ic);
        inl = &inline_.back();
      }
    }
    hot_.push_back({nullptr, c.flat, args, static_cast<int32_t>(c.outer), static_cast<int32_t>(c.count),
                    c.plan >= 0 ? &plans_[static_cast<size_t>(c.plan)] : nullptr,
                    c.mat >= 0 ? &mat_plans_[static_cast<size_t>(c.mat)] : nullptr, inl, -1,
                    static_cast<uint32_t>(k)});
  }
  plan_chains();
  plan_graphs();
  forwarded_ = 0;
  fused_ = 0;
  // Only for host programs: segments and chains index records by call.
  if (forwarding_ && chains_.empty() && segments_.empty()) plan_host_passes();
  may_wait_ = !segments_.empty() || std::any_of(hot_.begin(), hot_.end(), [](const Hot& h) {
    return !h.inl && !h.flat && !h.plan && !h.mat;
  });
  for (Hot& h : hot_) {  // a chain's first record launches the chain instead
    if (h.chain >= 0) continue;
    if (h.inl)
      h.go = h.inl;
    else if (h.plan)
      h.go = h.plan;
  }
  if (segments_.empty() && chains_.empty())
    lower_threaded();
  else
    threaded_.clear();
}

// Runs of two or more graph-safe device calls become one graph each; the rest replay one by one.
// A run the device cannot record falls back to plain launches (same results, more launches).
void KernelProgram::plan_graphs() const {
  segments_.clear();
  const DeviceProgramFns& fns = real_kernels(1).program;
  if (!fns.capture_graph || !cuda_graphs_enabled()) return;
  // A moving call records into a graph only inside a chain (whose index the graph sets per launch).
  std::vector<char> safe(calls_.size());
  for (size_t k = 0; k < calls_.size(); ++k) safe[k] = calls_[k].graph_safe && calls_[k].moving < 0;
  for (size_t k = 0; k < calls_.size(); ++k)
    if (hot_[k].chain >= 0)
      for (size_t j = k; j < chain_end_[static_cast<size_t>(hot_[k].chain)]; ++j) safe[j] = 1;
  size_t plain = 0;  // first call not yet in a segment
  for (size_t k = 0; k < calls_.size();) {
    size_t e = k;
    while (e < calls_.size() && safe[e]) ++e;
    if (e - k < 2) {
      k = e + 1;
      continue;
    }
    struct Ctx {
      const KernelProgram* self;
      size_t begin, end;
    } ctx{this, k, e};
    auto body = [](void* p) {
      auto* c = static_cast<Ctx*>(p);
      c->self->run_calls(c->begin, c->end, "graph capture", 0, 0);
    };
    void* g = nullptr;
    try {
      g = fns.capture_graph(body, &ctx, calls_[k].near);
    } catch (const DeviceError&) {
      g = nullptr;
    }
    if (g) {
      if (plain < k) segments_.push_back({plain, k, nullptr});
      segments_.push_back({k, e, std::shared_ptr<void>(g, fns.destroy_graph)});
      plain = e;
    }
    k = e;
  }
  if (segments_.empty()) return;
  if (plain < calls_.size()) segments_.push_back({plain, calls_.size(), nullptr});
}

void KernelProgram::run(const char* what, int64_t position, int64_t index) const {
  if (planned_ && !may_wait_) {  // host kernels resolved at planning: no device wait to warn about
    run_all(what, position, index);
    return;
  }
  DeviceLoopScope loop;
  if (!planned_) plan_segments();
  if (segments_.empty()) {  // hot_ may have fewer records than calls_ (plan_host_passes)
    run_all(what, position, index);
    return;
  }
  const DeviceProgramFns& fns = real_kernels(1).program;
  for (const Segment& s : segments_) {
    if (s.graph)
      fns.launch_graph(s.graph.get(), index);
    else
      run_calls(s.begin, s.end, what, position, index);
  }
}

void KernelProgram::finish(const char* what) const {
  if (deferred_.empty()) return;
  const DeviceProgramFns& fns = real_kernels(1).program;
  for (const Deferred& d : deferred_) {
    const unsigned long long w = fns.read_word(d.word);
    if (w != static_cast<unsigned long long>(LLONG_MAX))
      throw NumericError(
          std::string("[") + d.kernel + "] in a " + what + " on the GPU: the matrix at batch index " +
          std::to_string(w) + " " + failure_reason(d.kernel) +
          " (the GPU checks when the sweep ends, so the step is not named; run on the host for it)");
  }
}

int KernelProgram::read_in_place(const void* lo, int64_t bytes, const MovingBase* base) {
  const auto* first = static_cast<const char*>(lo);
  // First every call's verdict (the operand to redirect, -1: none; an `other` call's fields to
  // move), then the changes.
  std::vector<int8_t> operand(calls_.size(), -1);
  std::vector<std::vector<int>> fields(calls_.size());
  int redirected = 0;
  for (size_t k = 0; k < calls_.size(); ++k) {
    const int v = in_place_verdict(calls_[k], first, bytes, fields[k]);
    if (v == kRefuse) return -1;
    if (v == kUntouched) continue;
    if (v >= 0) operand[k] = static_cast<int8_t>(v);
    ++redirected;
  }
  for (size_t k = 0; k < calls_.size(); ++k) {
    Call& c = calls_[k];
    for (int t : fields[k]) {
      c.field_base[t] = base;
      c.field_offset[t] = static_cast<const char*>(c.touch[t]) - first;
    }
    if (operand[k] < 0) continue;
    c.moving = operand[k];
    c.base = base;
    c.offset = static_cast<const char*>(args_[static_cast<size_t>(c.first_arg + c.moving)].data) - first;
  }
  if (redirected > 0) planned_ = false;
  return redirected;
}

// An `other` call naming its tensors: the fields that point into the bytes, each of which must be a
// read it can move and has not moved already.
int KernelProgram::other_verdict(const Call& c, const std::function<bool(const void*)>& inside,
                                 std::vector<int>& fields) {
  for (int t = 0; t < c.touches; ++t) {
    if (!inside(c.touch[t])) continue;
    if (!c.field[t] || c.field_base[t]) return kRefuse;  // written, or not movable, or moved already
    fields.push_back(t);
  }
  return fields.empty() ? kUntouched : kFields;
}

// What read_in_place may do with call c for the bytes [first, first + bytes): kRefuse (it cannot
// be redirected: nothing is), kUntouched, kFields (an `other` call's movable fields, in `fields`),
// or the operand of a loop call to redirect.
int KernelProgram::in_place_verdict(const Call& c, const char* first, int64_t bytes,
                                    std::vector<int>& fields) const {
  auto inside = [&](const void* p) {
    const auto* q = static_cast<const char*>(p);
    return q >= first && q < first + bytes;
  };
  if (c.other && c.touches >= 0 && !c.describe) return other_verdict(c, inside, fields);
  int hits = 0, at = -1;
  auto note = [&](const void* p, int i) {
    if (p && inside(p)) {
      ++hits;
      at = i;
    }
  };
  if (c.fn || c.flat) {
    for (int i = 0; i < c.arity; ++i)
      note(c.flat ? flat_args_[static_cast<size_t>(c.first_arg + i)].data
                  : args_[static_cast<size_t>(c.first_arg + i)].data,
           i);
  } else if (c.plan >= 0) {
    const ContractPlan& pl = plans_[static_cast<size_t>(c.plan)];
    for (const void* p : {pl.x, pl.y, pl.base, static_cast<const void*>(pl.z)}) note(p, 0);
  } else if (c.touches >= 0 && !c.describe) {  // a matrix call (it names its tensors)
    for (int t = 0; t < c.touches; ++t) note(c.touch[t], 0);
  } else {
    return kRefuse;  // an `other` call whose tensors are not known (or a finite check)
  }
  if (hits == 0) return kUntouched;
  const bool loop_call = c.fn && !c.flat && c.moving < 0 && c.arity > 0;
  if (!loop_call || hits > 1 || at == 0) return kRefuse;
  return at;
}

void KernelProgram::append_moving(ElementwiseFn fn, const LoopDims& dims, const LoopArg* args, int moving,
                                  int64_t stride) {
  Call call;
  call.fn = fn;
  call.dims = dims;
  call.graph_safe = true;  // inside a chain only (plan_segments)
  call.near = args[1 - moving].data;
  call.moving = static_cast<int8_t>(moving);
  call.stride = stride;
  call.first_arg = static_cast<int32_t>(args_.size());
  args_.push_back(args[0]);
  args_.push_back(args[1]);
  calls_.push_back(std::move(call));
  planned_ = false;
}

void KernelProgram::append(const KernelProgram& other) {
  const auto arg0 = static_cast<int32_t>(args_.size()), flat0 = static_cast<int32_t>(flat_args_.size());
  const auto plan0 = static_cast<int32_t>(plans_.size()), dot0 = static_cast<int32_t>(device_dots_.size());
  const auto mat0 = static_cast<int32_t>(mat_plans_.size());
  args_.insert(args_.end(), other.args_.begin(), other.args_.end());
  flat_args_.insert(flat_args_.end(), other.flat_args_.begin(), other.flat_args_.end());
  plans_.insert(plans_.end(), other.plans_.begin(), other.plans_.end());
  mat_plans_.insert(mat_plans_.end(), other.mat_plans_.begin(), other.mat_plans_.end());
  device_dots_.insert(device_dots_.end(), other.device_dots_.begin(), other.device_dots_.end());
  buffers_.insert(buffers_.end(), other.buffers_.begin(), other.buffers_.end());
  deferred_.insert(deferred_.end(), other.deferred_.begin(), other.deferred_.end());
  for (Call c : other.calls_) {
    c.first_arg += c.flat ? flat0 : arg0;
    if (c.plan >= 0) c.plan += plan0;
    if (c.mat >= 0) c.mat += mat0;
    if (c.device_dot >= 0) c.device_dot += dot0;
    calls_.push_back(std::move(c));
  }
  planned_ = false;
}

}  // namespace tenax::detail
