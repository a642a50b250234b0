// Capturing kernel tables: every kernel entry is replaced by a trampoline that runs the real kernel
// and appends the call (with deep copies of its argument blocks) to the active program. The
// elementwise trampolines are generated here, one per table entry; the other families install the
// capture rules they declare beside their ops (install_<family>_capture).
#include "tenax/core/ops/capture.h"

#include <climits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "tenax/core/dtype.h"
#include "tenax/core/error.h"
#include "tenax/core/ops/capture_rules.h"
#include "tenax/core/ops/families.h"

namespace tenax::detail {
namespace {

constexpr int kDeviceKinds = 2;  // 0 host, 1 CUDA

// What a capturing elementwise kernel must copy: how many LoopArgs the kernel reads, and which
// of them (if any) points at a double on the caller's stack.
struct SlotInfo {
  int arity = 0;
  int scalar = -1;
};

// Visits every elementwise entry of a table in a fixed order with (entry, arity, scalar arg).
template <class V>
constexpr void visit_elementwise(KernelTable& t, V&& v) {
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
    for (auto& f : t.complex.tangent_acc[d]) v(f, arity, -1);
    for (auto& f : t.complex.tangent_set[d]) v(f, arity, -1);
  }
  ComplexKernels& c = t.complex;
  for (auto& f : c.make) v(f, 3, -1);
  for (auto* row : {&c.real, &c.imag, &c.conj, &c.abs, &c.angle, &c.from_real})
    for (auto& f : *row) v(f, 2, -1);
  v(c.narrow, 2, -1);
  v(c.widen, 2, -1);
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

// One capture slot (a trampoline) per elementwise entry of the table, counted at compile time: a
// kernel added to the table gets its slot with no limit to pass at run time.
constexpr int count_elementwise_entries() {
  KernelTable t;
  int n = 0;
  visit_elementwise(t, [&n](ElementwiseFn&, int, int) { ++n; });
  return n;
}
constexpr int kMaxSlots = count_elementwise_entries();

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

}  // namespace

DeviceBatch device_batch(const MatBatch& b, const void* near, const char* kernel) {
  const DeviceProgramFns& fns = real_kernels(1).program;
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

namespace {

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
  // The other kernel families' capture rules, each declared beside its ops.
  install_dot_capture(c, Dev);
  install_linalg_capture(c, Dev);
  install_recurrence_capture(c, Dev);
  install_tridiagonal_capture(c, Dev);
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

}  // namespace

const KernelTable& real_kernels(int device_kind) { return tables().real[device_kind]; }
const KernelTable& capturing_kernels(int device_kind) { return tables().capturing[device_kind]; }

namespace {
// Looked up per slice copy and per captured call: by a hash of the kernel, not a walk of the table.
const KernelTable::FlatTwin* twins_of(ElementwiseFn fn) {
  static const std::unordered_map<ElementwiseFn, const KernelTable::FlatTwin*> index = [] {
    std::unordered_map<ElementwiseFn, const KernelTable::FlatTwin*> m;
    const KernelTable& t = tables().real[0];
    for (int k = 0; k < t.n_flat; ++k) m.emplace(t.flat[k].kernel, &t.flat[k]);
    return m;
  }();
  const auto it = fn ? index.find(fn) : index.end();
  return it == index.end() ? nullptr : it->second;
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
  call.arity = static_cast<int8_t>(info.arity);
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
  call.form = t.slot_form[slot];
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

int64_t KernelCapture::matrix(const MatPlan& plan, const char* kernel,
                              std::initializer_list<const void*> touched) {
  const int64_t r = plan.run(plan);
  KernelProgram::Call c;
  c.mat = static_cast<int32_t>(program_.mat_plans_.size());
  c.kernel = kernel;
  program_.mat_plans_.push_back(plan);
  program_.calls_.push_back(std::move(c));
  touches(touched);
  return r;
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

void KernelCapture::defer(const unsigned long long* word, const char* kernel) {
  program_.deferred_.push_back({word, kernel});
}

void KernelCapture::touches(std::initializer_list<const void*> pointers) {
  KernelProgram::Call& c = program_.calls_.back();
  if (pointers.size() > std::size(c.touch))
    throw Error("[capture] internal: a call names " + std::to_string(pointers.size()) +
                " tensors; KernelProgram::Call::touch holds " + std::to_string(std::size(c.touch)));
  c.touches = 0;
  for (const void* p : pointers)
    if (p) c.touch[c.touches++] = p;
}

void KernelCapture::movable_reads(std::initializer_list<const void**> fields) {
  KernelProgram::Call& c = program_.calls_.back();
  for (const void** f : fields)
    for (int t = 0; t < c.touches; ++t)
      if (f && *f && c.touch[t] == *f && !c.field[t]) {  // one field per touch (operands may repeat)
        c.field[t] = f;
        break;
      }
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
