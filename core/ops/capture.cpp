// Capturing kernel tables: every kernel entry is replaced by a trampoline that runs the real kernel
// and appends the call (with deep copies of its argument blocks) to the active program.
#include "tenax/core/ops/capture.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "tenax/core/error.h"

namespace tenax::detail {
namespace {

constexpr int kMaxSlots = 256;
constexpr int kDeviceKinds = 2;  // 0 host, 1 CUDA

// What a capturing elementwise kernel must copy: how many LoopArgs the kernel reads, and which
// of them (if any) points at a double on the caller's stack.
struct SlotInfo {
  int arity = 0;
  int scalar = -1;
};

// Visits every elementwise entry of a table in a fixed order with (entry, arity, scalar arg).
template <class V>
void visit_elementwise(KernelTable& t, V&& v) {
  for (auto& row : t.unary)
    for (auto& f : row) v(f, 2, -1);
  for (auto& row : t.binary)
    for (auto& f : row) v(f, 3, -1);
  for (int d = 0; d < static_cast<int>(DerivOp::count); ++d) {
    int arity = d < static_cast<int>(DerivOp::add_a) ? 4 : 5;
    if (d == static_cast<int>(DerivOp::one)) arity = 2;
    if (d == static_cast<int>(DerivOp::argmax_mask) || d == static_cast<int>(DerivOp::softmax)) arity = 4;
    for (auto& f : t.deriv_acc[d]) v(f, arity, -1);
    for (auto& f : t.deriv_set[d]) v(f, arity, -1);
  }
  for (auto& row : t.compare)
    for (auto& f : row) v(f, 3, -1);
  for (auto& f : t.where) v(f, 4, -1);
  for (auto& f : t.copy) v(f, 2, -1);
  for (auto& f : t.acc) v(f, 2, -1);
  for (auto& f : t.max_acc) v(f, 2, -1);
  for (auto& f : t.scale) v(f, 3, 2);
  for (auto& f : t.fill) v(f, 2, 1);
  v(t.cast_f64_f32, 2, -1);
  v(t.cast_f32_f64, 2, -1);
}

struct Tables {
  KernelTable real[kDeviceKinds];
  KernelTable capturing[kDeviceKinds];
  ElementwiseFn slot_fn[kDeviceKinds][kMaxSlots] = {};
  FlatFn slot_flat[kDeviceKinds][kMaxSlots] = {};  ///< the flat twin of each slot's kernel
  ScalarFn slot_one[kMaxSlots] = {};               ///< the scalar twin of each host slot's kernel
  ScalarLoop::Form slot_form[kMaxSlots] = {};      ///< how each host slot's kernel runs in a ScalarLoop
  SlotInfo slot[kMaxSlots];
};

// What an absent operand of a flat call reads (zero as float64 and as float32).
alignas(16) const double kZeros[2] = {0.0, 0.0};

}  // namespace

// Drops unit dims, then merges each dim into the current (inner, then outer) one when every
// operand's stride allows.
bool collapse_loop(const LoopDims& dims, const LoopArg* args, int n, FlatLoop& out) {
  out = FlatLoop();
  int level = -1;  // -1: nothing yet, 0: building the inner dim, 1: the outer one
  for (int d = dims.rank - 1; d >= 0; --d) {
    const int64_t size = dims.sizes[d];
    if (size == 1) continue;
    auto st = [&](int a) { return args[a].data ? args[a].strides[d] : int64_t{0}; };
    bool merges = level >= 0;
    for (int a = 0; a < n && merges; ++a)
      merges = level == 0 ? st(a) == out.stride[a] * out.count : st(a) == out.outer_stride[a] * out.outer;
    if (merges) {
      (level == 0 ? out.count : out.outer) *= size;
      continue;
    }
    if (++level > 1) return false;
    for (int a = 0; a < n; ++a) (level == 0 ? out.stride : out.outer_stride)[a] = st(a);
    (level == 0 ? out.count : out.outer) = size;
  }
  for (int d = 0; d < dims.rank; ++d)
    if (dims.sizes[d] == 0) out.outer = 0;
  return true;
}

namespace {
const Tables& tables();

template <int Dev, int Slot>
void elementwise_trampoline(const LoopDims& dims, const LoopArg* args) {
  g_capture->elementwise(Dev, Slot, dims, args);
}

template <int Dev, size_t... S>
constexpr std::array<ElementwiseFn, sizeof...(S)> trampolines(std::index_sequence<S...>) {
  return {&elementwise_trampoline<Dev, static_cast<int>(S)>...};
}

// Offsets arrays of a batched matrix call, owned by the recorded call.
struct BatchCopy {
  std::vector<int64_t> a, b, c;
  int64_t count = 0;
  explicit BatchCopy(const MatBatch& m) : count(m.count) {
    auto take = [&](const int64_t* p, std::vector<int64_t>& v) {
      if (p) v.assign(p, p + m.count);
    };
    take(m.offsets_a, a);
    take(m.offsets_b, b);
    take(m.offsets_c, c);
  }
  [[nodiscard]] MatBatch view() const {
    return {count, a.empty() ? nullptr : a.data(), b.empty() ? nullptr : b.data(), c.empty() ? nullptr : c.data()};
  }
};

// Lane offsets of a recurrence call (and of its VJP's cotangent and adjoints), owned by the
// recorded call.
struct LaneCopy {
  std::vector<int64_t> v[6];
  void take(int k, const int64_t* p, int64_t n) {
    if (p) v[k].assign(p, p + n);
  }
  [[nodiscard]] const int64_t* at(int k) const { return v[k].empty() ? nullptr : v[k].data(); }
  void take_forward(const RecurrenceArgs& r) {
    take(0, r.off_a, r.lanes);
    take(1, r.off_b, r.lanes);
    take(2, r.off_x, r.lanes);
  }
  void bind_forward(RecurrenceArgs& r) const {
    r.off_a = at(0);
    r.off_b = at(1);
    r.off_x = at(2);
  }
};

template <int Dev, int Dt>
void contract_trampoline(const ContractArgs& a) {
  const ContractFn fn = tables().real[Dev].contract[Dt];
  const ContractPlanFn plan_of = tables().real[Dev].contract_plan[Dt];
  ContractPlan plan;
  if (Dev == 0 && plan_of && plan_of(a, plan)) {  // replayed from its plan: a few words, not ContractArgs
    g_capture->contract(plan);
    return;
  }
  if constexpr (Dev == 1) {
    g_capture->device_contract(fn, a, Dt);
  } else {
    g_capture->other(
        [fn, a] {
          fn(a);
          return int64_t{-1};
        },
        "dot");
  }
}

// A device batch for replays: the offsets and a failure word (LLONG_MAX: none) in device memory
// owned by the recorded call; the word is registered with the program (KernelProgram::finish).
struct DeviceBatch {
  std::shared_ptr<void> block;
  MatBatch view;
};
DeviceBatch device_batch(const MatBatch& b, const void* near, const char* kernel) {
  const DeviceProgramFns& fns = tables().real[1].program;
  std::vector<int64_t> host;
  const int64_t* parts[3] = {b.offsets_a, b.offsets_b, b.offsets_c};
  for (const int64_t* p : parts)
    if (p) host.insert(host.end(), p, p + b.count);
  host.push_back(LLONG_MAX);
  DeviceBatch d;
  d.block = std::shared_ptr<void>(fns.upload(host.data(), host.size() * sizeof(int64_t), near), fns.release);
  auto* base = static_cast<int64_t*>(d.block.get());
  const int64_t** views[3] = {&d.view.offsets_a, &d.view.offsets_b, &d.view.offsets_c};
  int64_t at = 0;
  for (int k = 0; k < 3; ++k)
    if (parts[k]) {
      *views[k] = base + at;
      at += b.count;
    }
  d.view.count = b.count;
  d.view.deferred_failure = reinterpret_cast<unsigned long long*>(base + at);
  g_capture->defer(d.view.deferred_failure, kernel);
  return d;
}

// Records a batched matrix call: on the host with its own copy of the offsets; on a device as a
// deferred, graph-safe call on device offsets. `call(batch)` runs the kernel.
template <int Dev, class Call>
int64_t record_matrix_call(const MatBatch& b, const void* near, const char* kernel, Call call) {
  if constexpr (Dev == 1) {
    auto d = device_batch(b, near, kernel);
    return g_capture->other([&] { return call(b); }, kernel, true, near, [call, d] { return call(d.view); });
  } else {
    return g_capture->other([call, bc = BatchCopy(b)] { return call(bc.view()); }, kernel);
  }
}

template <int Dev, int Dt>
int64_t cholesky_trampoline(MatView a, MatView l, const MatBatch& b) {
  const CholeskyFn fn = tables().real[Dev].cholesky[Dt];
  return record_matrix_call<Dev>(b, l.data, "cholesky",
                                 [fn, a, l](const MatBatch& m) { return fn(a, l, m); });
}
template <int Dev, int Dt>
void cholesky_vjp_trampoline(MatView l, MatView lbar, MatView abar, const MatBatch& b) {
  const CholeskyVjpFn fn = tables().real[Dev].cholesky_vjp[Dt];
  (void)record_matrix_call<Dev>(b, abar.data, "cholesky vjp", [fn, l, lbar, abar](const MatBatch& m) {
    fn(l, lbar, abar, m);
    return int64_t{-1};
  });
}
template <int Dev, int Dt>
int64_t tri_solve_trampoline(MatView t, RhsView r, bool lower, const MatBatch& b) {
  const TriSolveFn fn = tables().real[Dev].tri_solve[Dt];
  return record_matrix_call<Dev>(b, r.data, "triangular_solve",
                                 [fn, t, r, lower](const MatBatch& m) { return fn(t, r, lower, m); });
}
template <int Dev, int Dt>
int64_t solve_trampoline(MatView a, RhsView r, const MatBatch& b) {
  const SolveFn fn = tables().real[Dev].solve[Dt];
  return record_matrix_call<Dev>(b, r.data, "solve", [fn, a, r](const MatBatch& m) { return fn(a, r, m); });
}
template <int Dev, int Dt>
int64_t logdet_trampoline(MatView a, void* out, MatView inv_t, bool want, const MatBatch& b) {
  const LogdetFn fn = tables().real[Dev].logdet[Dt];
  return record_matrix_call<Dev>(
      b, out, "logdet", [fn, a, out, inv_t, want](const MatBatch& m) { return fn(a, out, inv_t, want, m); });
}
template <int Dev, int Dt>
void recurrence_trampoline(const RecurrenceArgs& r) {
  const RecurrenceFn fn = tables().real[Dev].recurrence[Dt];
  LaneCopy lc;
  lc.take_forward(r);
  g_capture->other(
      [fn, r, lc] {
        RecurrenceArgs c = r;
        lc.bind_forward(c);
        fn(c);
        return int64_t{-1};
      },
      "linear_recurrence");
}
template <int Dev, int Dt>
void recurrence_vjp_trampoline(const RecurrenceVjpArgs& r) {
  const RecurrenceVjpFn fn = tables().real[Dev].recurrence_vjp[Dt];
  LaneCopy lc;
  lc.take_forward(r.fwd);
  lc.take(3, r.off_g, r.fwd.lanes);
  lc.take(4, r.off_da, r.fwd.lanes);
  lc.take(5, r.off_db, r.fwd.lanes);
  g_capture->other(
      [fn, r, lc] {
        RecurrenceVjpArgs c = r;
        lc.bind_forward(c.fwd);
        c.off_g = lc.at(3);
        c.off_da = lc.at(4);
        c.off_db = lc.at(5);
        fn(c);
        return int64_t{-1};
      },
      "linear_recurrence vjp");
}

template <int Dev, int Dt>
int64_t tridiagonal_trampoline(const TridiagonalArgs& a) {
  const TridiagonalFn fn = tables().real[Dev].tridiagonal[Dt];
  using S = TridiagonalArgs::Adjoints;
  LaneCopy lc;
  for (int o = 0; o < TridiagonalArgs::count; ++o) lc.take(o, a.off[o], a.systems);
  // The fused reverse rule's offsets, owned by the recorded call too.
  auto vjp = a.vjp ? std::make_shared<S>(*a.vjp) : nullptr;
  auto vjp_off = std::make_shared<std::vector<int64_t>[]>(S::slots);
  if (vjp)
    for (int k = 0; k < S::slots; ++k)
      if (vjp->off[k]) {
        vjp_off[k].assign(vjp->off[k], vjp->off[k] + a.systems);
        vjp->off[k] = vjp_off[k].data();
      }
  return g_capture->other(
      [fn, a, lc, vjp, vjp_off] {
        TridiagonalArgs c = a;
        for (int o = 0; o < TridiagonalArgs::count; ++o) c.off[o] = lc.at(o);
        c.vjp = vjp.get();
        return fn(c);
      },
      "tridiagonal_solve");
}

// The inline float64 form of host kernel f of table t, or Kind::call (core/ops/scalar_loop.h).
// Reverse rules have operands (dst, g, a, b, y): add's write or add g, sub's second -g, mul's
// g * b and g * a.
ScalarLoop::Form inline_form(const KernelTable& t, ElementwiseFn f) {
  using K = ScalarLoop::Kind;
  auto form = [](K k, int8_t arity, int8_t a = 1, int8_t b = 2) {
    return ScalarLoop::Form{k, arity, {0, a, b}};
  };
  auto set = [&](DerivOp d) { return t.deriv_set[static_cast<int>(d)][0]; };
  auto acc = [&](DerivOp d) { return t.deriv_acc[static_cast<int>(d)][0]; };
  auto binary = [&](BinaryOp b) { return t.binary[static_cast<int>(b)][0]; };
  auto unary = [&](UnaryOp u) { return t.unary[static_cast<int>(u)][0]; };
  if (f == t.copy[0]) return form(K::copy, 2);
  if (f == t.acc[0]) return form(K::acc, 2);
  if (f == binary(BinaryOp::add)) return form(K::add, 3);
  if (f == binary(BinaryOp::sub)) return form(K::sub, 3);
  if (f == binary(BinaryOp::mul)) return form(K::mul, 3);
  if (f == unary(UnaryOp::neg)) return form(K::neg, 2);
  if (f == unary(UnaryOp::square)) return form(K::mul, 3, 1, 1);
  for (DerivOp d : {DerivOp::one, DerivOp::add_a, DerivOp::add_b, DerivOp::sub_a}) {
    if (f == set(d)) return form(K::copy, 2);
    if (f == acc(d)) return form(K::acc, 2);
  }
  if (f == set(DerivOp::sub_b)) return form(K::neg, 2);
  if (f == acc(DerivOp::sub_b)) return form(K::acc_neg, 2);
  if (f == set(DerivOp::mul_a)) return form(K::mul, 3, 1, 3);
  if (f == acc(DerivOp::mul_a)) return form(K::mul_acc, 3, 1, 3);
  if (f == set(DerivOp::mul_b)) return form(K::mul, 3, 1, 2);
  if (f == acc(DerivOp::mul_b)) return form(K::mul_acc, 3, 1, 2);
  return {};
}

// Replaces each non-null entry of `c` (a copy of the real table) by its capturing trampoline.
template <int Dev>
void install(Tables& t) {
  KernelTable& c = t.capturing[Dev];
  static constexpr auto tramp = trampolines<Dev>(std::make_index_sequence<kMaxSlots>{});
  int slot = 0;
  visit_elementwise(c, [&](ElementwiseFn& f, int arity, int scalar) {
    if (slot >= kMaxSlots) throw Error("[capture] internal: more elementwise kernels than capture slots");
    t.slot[slot] = {arity, scalar};
    t.slot_fn[Dev][slot] = f;
    for (int k = 0; f && k < c.n_flat; ++k)
      if (c.flat[k].kernel == f) {
        t.slot_flat[Dev][slot] = c.flat[k].flat;
        if (Dev == 0) t.slot_one[slot] = c.flat[k].one;
      }
    if (Dev == 0 && f) t.slot_form[slot] = inline_form(c, f);
    if (f) f = tramp[static_cast<size_t>(slot)];
    ++slot;
  });
  auto swap_in = [](auto& entry, auto fn) {
    if (entry) entry = fn;
  };
  swap_in(c.contract[0], &contract_trampoline<Dev, 0>);
  swap_in(c.contract[1], &contract_trampoline<Dev, 1>);
  swap_in(c.cholesky[0], &cholesky_trampoline<Dev, 0>);
  swap_in(c.cholesky[1], &cholesky_trampoline<Dev, 1>);
  swap_in(c.cholesky_vjp[0], &cholesky_vjp_trampoline<Dev, 0>);
  swap_in(c.cholesky_vjp[1], &cholesky_vjp_trampoline<Dev, 1>);
  swap_in(c.tri_solve[0], &tri_solve_trampoline<Dev, 0>);
  swap_in(c.tri_solve[1], &tri_solve_trampoline<Dev, 1>);
  swap_in(c.solve[0], &solve_trampoline<Dev, 0>);
  swap_in(c.solve[1], &solve_trampoline<Dev, 1>);
  swap_in(c.logdet[0], &logdet_trampoline<Dev, 0>);
  swap_in(c.logdet[1], &logdet_trampoline<Dev, 1>);
  swap_in(c.recurrence[0], &recurrence_trampoline<Dev, 0>);
  swap_in(c.recurrence[1], &recurrence_trampoline<Dev, 1>);
  swap_in(c.recurrence_vjp[0], &recurrence_vjp_trampoline<Dev, 0>);
  swap_in(c.recurrence_vjp[1], &recurrence_vjp_trampoline<Dev, 1>);
  swap_in(c.tridiagonal[0], &tridiagonal_trampoline<Dev, 0>);
  swap_in(c.tridiagonal[1], &tridiagonal_trampoline<Dev, 1>);
}

const Tables& tables() {
  static const Tables t = [] {
    Tables x;
    register_cpu_kernels(x.real[0]);
    register_cuda_kernels(x.real[1]);
    x.capturing[0] = x.real[0];
    x.capturing[1] = x.real[1];
    install<0>(x);
    install<1>(x);
    return x;
  }();
  return t;
}

const char* failure_reason(const char* kernel) {
  const std::string k = kernel;
  if (k == "cholesky") return "is not positive definite";
  if (k == "triangular_solve") return "has a zero on its diagonal";
  return "is singular";
}

}  // namespace

namespace {
const KernelTable::FlatTwin* twins_of(ElementwiseFn fn) {
  const KernelTable& t = tables().real[0];
  for (int k = 0; fn && k < t.n_flat; ++k)
    if (t.flat[k].kernel == fn) return &t.flat[k];
  return nullptr;
}
}  // namespace

FlatFn flat_twin(ElementwiseFn fn) {
  const KernelTable::FlatTwin* t = twins_of(fn);
  return t ? t->flat : nullptr;
}

ScalarFn scalar_twin(ElementwiseFn fn) {
  const KernelTable::FlatTwin* t = twins_of(fn);
  return t ? t->one : nullptr;
}

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
  for (size_t k = begin; k < end; ++k) {
    const Hot& h = hot_[k];
    if (h.flat) {
      if (h.form.kind != ScalarLoop::Kind::call)
        run_form(h.form, h.args, h.count);
      else
        h.flat(h.outer, h.count, h.args);
      continue;
    }
    if (h.plan) {
      h.plan->run(*h.plan);
      continue;
    }
    if (h.chain >= 0) {  // never a flat or planned (host) call
      const auto c = static_cast<size_t>(h.chain);
      tables().real[1].program.launch_fused(chains_[c].get(), index);
      k = chain_end_[c] - 1;
      continue;
    }
    const Call& c = calls_[k];
    if (c.fn && c.moving >= 0) {
      LoopArg now[2] = {args_[static_cast<size_t>(c.first_arg)], args_[static_cast<size_t>(c.first_arg) + 1]};
      now[c.moving].data = static_cast<char*>(now[c.moving].data) + index * c.stride;
      c.fn(c.dims, now);
      continue;
    }
    if (c.fn) {
      c.fn(c.dims, &args_[static_cast<size_t>(c.first_arg)]);
      continue;
    }
    const int64_t bad = c.other();
    if (bad >= 0 && c.describe)
      throw NumericError(c.describe(bad) + " at " + what + " " + std::to_string(position) +
                         " (finite checks are on: set_check_finite / TENAX_CHECK_FINITE)");
    if (bad >= 0)
      throw NumericError(std::string("[") + c.kernel + "] at " + what + " " + std::to_string(position) +
                         ": the matrix at batch index " + std::to_string(bad) + " " + failure_reason(c.kernel));
  }
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
  static const bool on = [] {
    const char* v = std::getenv("TENAX_CUDA_GRAPHS");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

namespace {
std::atomic<bool>& fusion_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("TENAX_CUDA_FUSION");
    return !(v && std::string(v) == "0");
  }();
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
  const DeviceProgramFns& fns = tables().real[1].program;
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

// Runs of two or more graph-safe device calls become one graph each; the rest replay one by one.
// A run the device cannot record falls back to plain launches (same results, more launches).
void KernelProgram::plan_segments() const {
  planned_ = true;
  hot_.clear();
  for (const Call& c : calls_)
    hot_.push_back({c.flat, c.flat ? &flat_args_[static_cast<size_t>(c.first_arg)] : nullptr, c.outer,
                    c.count, c.plan >= 0 ? &plans_[static_cast<size_t>(c.plan)] : nullptr, c.form});
  plan_chains();
  segments_.clear();
  const DeviceProgramFns& fns = tables().real[1].program;
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
  DeviceLoopScope loop;
  if (!planned_) plan_segments();
  if (segments_.empty()) {
    run_calls(0, calls_.size(), what, position, index);
    return;
  }
  const DeviceProgramFns& fns = tables().real[1].program;
  for (const Segment& s : segments_) {
    if (s.graph)
      fns.launch_graph(s.graph.get(), index);
    else
      run_calls(s.begin, s.end, what, position, index);
  }
}

void KernelProgram::finish(const char* what) const {
  if (deferred_.empty()) return;
  const DeviceProgramFns& fns = tables().real[1].program;
  for (const Deferred& d : deferred_) {
    const unsigned long long w = fns.read_word(d.word);
    if (w != static_cast<unsigned long long>(LLONG_MAX))
      throw NumericError(
          std::string("[") + d.kernel + "] in a " + what + " on the GPU: the matrix at batch index " +
          std::to_string(w) + " " + failure_reason(d.kernel) +
          " (the GPU checks when the sweep ends, so the step is not named; run on the host for it)");
  }
}

KernelCapture::KernelCapture(KernelProgram& program) : program_(program) {
  if (g_capture) throw Error("[capture] internal: kernel captures do not nest");
  (void)tables();
  g_capture = this;
}

KernelCapture::~KernelCapture() {
  g_capture = nullptr;
  for (const ScalarFix& f : fixes_) {
    void* p = &program_.scalars_[f.scalar];
    if (f.flat)
      program_.flat_args_[f.arg].data = p;
    else
      program_.args_[f.arg].data = p;
  }
}

const KernelTable& KernelCapture::table(Device d) const {
  return tables().capturing[d.kind == Device::Kind::cpu ? 0 : 1];
}

void KernelCapture::elementwise(int device_kind, int slot, const LoopDims& dims, const LoopArg* args) {
  const Tables& t = tables();
  const ElementwiseFn fn = t.slot_fn[device_kind][slot];
  fn(dims, args);
  const SlotInfo& info = t.slot[slot];
  if (record_flat(device_kind, slot, dims, args)) return;
  KernelProgram::Call call;
  call.fn = fn;
  call.dims = dims;
  call.graph_safe = device_kind == 1;
  call.near = args[0].data;
  call.first_arg = static_cast<int32_t>(program_.args_.size());
  for (int i = 0; i < info.arity; ++i) {
    program_.args_.push_back(args[i]);
    if (i == info.scalar) {
      program_.scalars_.push_back(*static_cast<const double*>(args[i].data));
      fixes_.push_back({program_.args_.size() - 1, program_.scalars_.size() - 1, false});
    }
  }
  program_.calls_.push_back(std::move(call));
}

bool KernelCapture::record_flat(int device_kind, int slot, const LoopDims& dims, const LoopArg* args) {
  const Tables& t = tables();
  const FlatFn flat = t.slot_flat[device_kind][slot];
  const int arity = t.slot[slot].arity, scalar = t.slot[slot].scalar;
  if (!flat || device_kind != 0) return false;
  int64_t total = 1;
  for (int d = 0; d < dims.rank; ++d) total *= dims.sizes[d];
  if (total > kFlatLimit) return false;
  // The scalar operand (fill / scale) is a pointer, not a strided operand.
  LoopArg strided[8];
  for (int i = 0; i < arity; ++i) {
    strided[i] = args[i];
    if (i == scalar) strided[i].data = nullptr;
  }
  FlatLoop loop;
  if (!collapse_loop(dims, strided, arity, loop)) return false;
  KernelProgram::Call call;
  call.flat = flat;
  call.outer = loop.outer;
  call.count = loop.count;
  if (loop.outer == 1) call.form = t.slot_form[slot];
  if (loop.outer == 1 && loop.count == 1) call.one = t.slot_one[slot];
  call.arity = static_cast<int8_t>(arity);
  call.first_arg = static_cast<int32_t>(program_.flat_args_.size());
  for (int i = 0; i < arity; ++i) {
    FlatArg f{args[i].data, loop.stride[i], loop.outer_stride[i]};
    if (!f.data) f = {const_cast<double*>(kZeros), 0, 0};
    program_.flat_args_.push_back(f);
    if (i == scalar) {
      program_.scalars_.push_back(*static_cast<const double*>(args[i].data));
      fixes_.push_back({program_.flat_args_.size() - 1, program_.scalars_.size() - 1, true});
    }
  }
  program_.calls_.push_back(std::move(call));
  return true;
}

int64_t KernelCapture::other(std::function<int64_t()> call, const char* kernel, bool graph_safe,
                             const void* near, std::function<int64_t()> replay) {
  const int64_t r = call();
  KernelProgram::Call c;
  c.other = replay ? std::move(replay) : std::move(call);
  c.kernel = kernel;
  c.graph_safe = graph_safe;
  c.near = near;
  program_.calls_.push_back(std::move(c));
  return r;
}

void KernelCapture::contract(const ContractPlan& plan) {
  plan.run(plan);
  KernelProgram::Call c;
  c.plan = static_cast<int32_t>(program_.plans_.size());
  c.kernel = "dot";
  program_.plans_.push_back(plan);
  program_.calls_.push_back(std::move(c));
}

void KernelCapture::device_contract(ContractFn fn, const ContractArgs& a, int dtype) {
  other(
      [fn, a] {
        fn(a);
        return int64_t{-1};
      },
      "dot", true, a.z);
  program_.calls_.back().device_dot = static_cast<int32_t>(program_.device_dots_.size());
  program_.calls_.back().dtype = static_cast<int8_t>(dtype);
  program_.device_dots_.push_back(a);
}

void KernelCapture::moving(ElementwiseFn fn, const LoopDims& dims, const LoopArg* args, int moving,
                           int64_t stride, int64_t index) {
  LoopArg now[2] = {args[0], args[1]};
  now[moving].data = static_cast<char*>(now[moving].data) + index * stride;
  fn(dims, now);
  program_.append_moving(fn, dims, args, moving, stride);
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
  args_.insert(args_.end(), other.args_.begin(), other.args_.end());
  flat_args_.insert(flat_args_.end(), other.flat_args_.begin(), other.flat_args_.end());
  plans_.insert(plans_.end(), other.plans_.begin(), other.plans_.end());
  device_dots_.insert(device_dots_.end(), other.device_dots_.begin(), other.device_dots_.end());
  buffers_.insert(buffers_.end(), other.buffers_.begin(), other.buffers_.end());
  deferred_.insert(deferred_.end(), other.deferred_.begin(), other.deferred_.end());
  for (Call c : other.calls_) {
    c.first_arg += c.flat ? flat0 : arg0;
    if (c.plan >= 0) c.plan += plan0;
    if (c.device_dot >= 0) c.device_dot += dot0;
    calls_.push_back(std::move(c));
  }
  planned_ = false;
}

void KernelCapture::defer(const unsigned long long* word, const char* kernel) {
  program_.deferred_.push_back({word, kernel});
}

void KernelCapture::check(std::function<int64_t()> find, std::function<std::string(int64_t)> describe) {
  KernelProgram::Call c;
  c.other = std::move(find);
  c.describe = std::move(describe);
  c.kernel = "check_finite";
  program_.calls_.push_back(std::move(c));
}

void keep_for_capture(Storage* s) {
  s->retain();
  g_capture->program_.buffers_.emplace_back(s);
}

}  // namespace tenax::detail
