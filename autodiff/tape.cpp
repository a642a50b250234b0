// The tape: recording and the reverse and forward sweeps (the adjoint store: tape_adjoints.cpp).
// The reverse sweep is one short loop over flat records.
#include "tenax/autodiff/tape_impl.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "tenax/autodiff/recording.h"
#include "tenax/core/distributed_impl.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/collective.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {
namespace {

// Saved values before input i's (the generic x86-64 build has no popcnt instruction: std::popcount
// is a library call there, and the common i is 0 or 1).
int saved_before(uint32_t s, int i) {
  int n = 0;
  for (int k = 0; k < i && k < 31; ++k) n += static_cast<int>((s >> k) & 1u);
  return n;
}

// Index of input i's residual in the record's slice of a_.saved, or -1 when not kept.
int saved_slot(const Record& r, bool all, int i) {
  if (all) return i;
  const uint32_t s = r.op->saves;
  if (i < 31 && !(s & (1u << i))) return -1;
  return saved_before(s, i);
}

int saved_output_slot(const Record& r, bool all) {
  if (all) return r.n_inputs;
  const uint32_t s = r.op->saves;
  if (!(s & kSaveOutput)) return -1;
  return saved_before(s, r.n_inputs);
}

[[noreturn, gnu::cold]] void throw_not_saved(const Record& r, int i) {
  throw AutodiffError(std::string("[") + r.op->name + "] internal: " +
                      (i < 0 ? std::string("the output was") : "input " + std::to_string(i) + " was") +
                      " not saved for the reverse pass");
}

class SweepContext final : public VjpContext, public JvpContext {
 public:
  SweepContext(TapeImpl& tape, const Record& r, bool all, const std::vector<Tensor>* tangents)
      : tape_(tape), r_(r), all_(all), tangents_(tangents) {}

  const Tensor& cotangent() const override { return tape_.cotangent_of(r_.out); }
  const Tensor& input(int i) const override {
    int slot = saved_slot(r_, all_, i);
    if (slot < 0) throw_not_saved(r_, i);
    if (r_.lane_n != 0) return tape_.lane_saved(r_, i);
    return tape_.saved()[static_cast<size_t>(r_.first_saved + slot)];
  }
  const Tensor& output() const override {
    int slot = saved_output_slot(r_, all_);
    if (slot < 0) throw_not_saved(r_, -1);
    if (r_.lane_n != 0) return tape_.lane_saved(r_, -1);
    return tape_.saved()[static_cast<size_t>(r_.first_saved + slot)];
  }
  const Axes& input_axes(int i) const override {
    int32_t v = input_var(i);
    if (v >= 0) return tape_.var_axes(v);
    if (v <= -2) return tape_.axes_at(-2 - v);
    return input(i).axes();
  }
  int num_inputs() const override { return r_.n_inputs; }
  bool needs_grad(int i) const override { return input_var(i) >= 0; }
  // (input_var(i) < -1 encodes the axes of an untracked input; see TapeImpl::record.)
  const Tensor& adjoint(int i) override {
    int32_t v = input_var(i);
    if (v < 0) throw AutodiffError(std::string("[") + r_.op->name + "] internal: input needs no gradient");
    return tape_.adjoint(v);
  }
  const Tensor& adjoint_to_write(int i, bool& fresh) override {
    fresh = false;
    if (taken_twice(i) || input_var(i) < 0) return adjoint(i);  // taken twice: both rules accumulate
    return tape_.adjoint_to_write(input_var(i), fresh);
  }
  bool lend_adjoint(int i, const Tensor& value) override {
    return input_var(i) >= 0 && !taken_twice(i) && tape_.lend_adjoint(input_var(i), value);
  }
  bool lends() const override { return true; }
  const Attrs& attrs() const override { return tape_.attrs_of(r_); }
  const Tensor& tangent(int i) const override {
    int32_t v = input_var(i);
    static const Tensor none;
    return v >= 0 ? (*tangents_)[static_cast<size_t>(v)] : none;
  }

 private:
  int32_t input_var(int i) const { return tape_.inputs()[static_cast<size_t>(r_.first_input + i)]; }
  // Whether the op takes input i's variable as another input too (its adjoint gets two additions).
  bool taken_twice(int i) const {
    for (int k = 0; k < r_.n_inputs; ++k)
      if (k != i && input_var(k) == input_var(i)) return true;
    return false;
  }

  TapeImpl& tape_;
  const Record& r_;
  bool all_;
  const std::vector<Tensor>* tangents_;
};

}  // namespace

namespace {
// Spare arrays of this thread's last finished tape. The flag outlives the spare (trivially
// destructible), so a tape destroyed during thread exit frees its arrays instead.
thread_local bool t_spare_gone = false;
struct Spare {
  TapeArrays arrays;
  ~Spare() { t_spare_gone = true; }
};
Spare& spare() {
  thread_local Spare s;
  return s;
}
}  // namespace

const OpDef kCustomOp = {"custom", -1, nullptr, nullptr, nullptr, 0, 0, false, nullptr};

void TapeArrays::clear() {
  customs.clear();
  records.clear();
  inputs.clear();
  saved.clear();
  values_used = 0;
  vars.clear();
  axes.clear();
  attrs.clear();
  adjoints.clear();
  lane_adjoints.clear();
  arena.reset();
  lent.clear();
  partial.clear();
  sources.clear();
}

TapeImpl::TapeImpl(uint32_t serial) : serial_(serial) {
  if (!t_spare_gone) std::swap(a_, spare().arrays);
}

// Arrays of tapes up to this many records are kept for the next tape of the thread (a few MiB at
// most); a larger tape gives its memory back when it ends.
constexpr std::size_t kSpareRecords = std::size_t(1) << 16;

TapeImpl::~TapeImpl() {
  a_.clear();
  if (!t_spare_gone && a_.records.capacity() <= kSpareRecords &&
      a_.records.capacity() >= spare().arrays.records.capacity())
    std::swap(a_, spare().arrays);
}

const Attrs& TapeImpl::attrs_of(const Record& r) const {
  return r.attrs < 0 ? kNoAttrs : a_.attrs[static_cast<size_t>(r.attrs)];
}

int32_t TapeImpl::push_axes(const Axes& axes) {
  a_.axes.push_back(axes);
  return static_cast<int32_t>(a_.axes.size() - 1);
}

inline int32_t TapeImpl::new_var(const Tensor& t, int32_t record, bool view) {
  a_.vars.push_back({intern_axes(t.axes()), t.dtype(), view, t.device(), record});
  return static_cast<int32_t>(a_.vars.size() - 1);
}

int32_t TapeImpl::var_of(const Tensor& t, const char* what) const {
  if (!t.defined()) throw AutodiffError(std::string("[grad] ") + what + " is undefined");
  if (t.var() < 0 || t.tape_serial() != serial_)
    throw AutodiffError(std::string("[grad] ") + what + " " + t.axes().describe() +
                        " is not tracked by this tape; watch it (or pass it as an argument) before using it");
  return t.var();
}

Tensor TapeImpl::watch(const Tensor& t) {
  if (!t.defined()) throw AutodiffError("[watch] the tensor is undefined");
  if (!is_inexact(t.dtype()))
    throw DTypeError(std::string("[watch] only float64, float32, complex128 and complex64 tensors can be differentiated, got ") +
                     dtype_name(t.dtype()));
  Tensor w = t;
  TensorAccess::set_var(w, new_var(t, -1), serial_);
  return w;
}

// The finite checks of the backward pass: the adjoints this record's rule accumulated into.
void TapeImpl::check_adjoints(const Record& r) const {
  for (int i = 0; i < r.n_inputs; ++i) {
    const int32_t v = a_.inputs[static_cast<size_t>(r.first_input + i)];
    if (v < 0 || !a_.adjoints.defined(static_cast<size_t>(v))) continue;
    if (!a_.partial.empty() && partial_range(v)) continue;  // unwritten outside
    check_finite_value(a_.adjoints.get(static_cast<size_t>(v)), r.op->name,
                       "in the backward pass (the adjoint of its input " + std::to_string(i) + ")");
  }
}

// Rethrows the NumericError being handled with the source of `record` in front (a model node's
// JSON pointer), unless it names one already or the record has none.
void TapeImpl::rethrow_with_source(int32_t record) const {
  auto it = std::lower_bound(a_.sources.begin(), a_.sources.end(), record,
                             [](const auto& e, int32_t rid) { return e.first < rid; });
  try {
    throw;
  } catch (const NumericError& e) {
    if (it == a_.sources.end() || it->first != record || e.what()[0] == '/') throw;
    throw NumericError(*it->second + ": " + e.what());
  }
}

// Before the record arrays grow (they double), the growth must fit the host memory budget.
void TapeImpl::check_growth() const {
  if (a_.records.size() < a_.records.capacity() || memory_budget(Device::cpu()) <= 0) return;
  const auto cap = static_cast<int64_t>(std::max<std::size_t>(a_.records.capacity(), 64));
  const int64_t per_record = sizeof(Record) + sizeof(VarInfo) + 3 * sizeof(int32_t) + sizeof(Tensor);
  check_memory_budget(Device::cpu(), cap * per_record, "the tape's record arrays");
}

inline void TapeImpl::append(const OpDef& op, Inputs in, const Attrs& attrs, Tensor& out) {
  check_growth();
  const int n = in.n;
  const int32_t rid = static_cast<int32_t>(a_.records.size());
  int32_t attrs_index = -1;
  if (!op.attr_free) {
    a_.attrs.push_back(attrs);
    attrs_index = static_cast<int32_t>(a_.attrs.size() - 1);
  }
  const auto first_input = static_cast<int32_t>(a_.inputs.size());
  const auto first_saved = static_cast<int32_t>(a_.saved.size());
  for (int i = 0; i < n; ++i) {
    const bool saved = keep_all_ || (i < 31 && (op.saves & (1u << i)));
    int32_t v = !(i < 31 && (op.nondiff & (1u << i))) && is_tracked(in[i]) ? in[i].var() : -1;
    // An untracked input that is not saved keeps its axes (VJP rules may ask for them) as
    // -2 - index into the axes table; the hot attribute-free ops never ask.
    if (v < 0 && !saved && !op.attr_free) v = -2 - intern_axes(in[i].axes());
    a_.inputs.push_back(v);
  }
  const int32_t out_var = new_var(out, rid, op.view);
  TensorAccess::set_var(out, out_var, serial_);
  if (g_source) a_.sources.emplace_back(rid, g_source);
  for (int i = 0; i < n; ++i)
    if (keep_all_ || (i < 31 && (op.saves & (1u << i)))) {
      a_.saved.push_back(in[i]);
      residual_bytes_ += logical_bytes(in[i]);
    }
  if (keep_all_ || (op.saves & kSaveOutput)) {
    a_.saved.push_back(out);
    residual_bytes_ += logical_bytes(out);
  }
  // Written field by field into place (a Record built whole beforehand and copied in was stored in
  // pieces and read back as one vector: a store-forwarding stall).
  Record& r = a_.records.emplace_back();
  r.op = &op;
  r.attrs = attrs_index;
  r.out = out_var;
  r.first_input = first_input;
  r.n_inputs = n;
  r.first_saved = first_saved;
}

namespace {
// The sharding of a call's inputs (0: none). A tape never records while a body is traced (the
// plan's recorder does), so a traced function's sharded ops reach the tape only as its one node.
uint16_t sharding_of_call(const Tensor* const* in, int n) {
  uint16_t id = 0;
  for (int i = 0; i < n; ++i) id |= in[i]->shard_id();
  return id;
}
}  // namespace

// A call with a sharded input takes each tracked replicated input through its varying alias
// (collective.h: op_vary), whose adjoint is summed over ranks once in the reverse sweep.
Tensor TapeImpl::varying(const Tensor& t, uint16_t id) {
  Tensor alias = t;
  const auto [it, fresh] = varying_.try_emplace(t.var(), -1);
  if (fresh) {
    Attrs a;
    a.i[0] = id;
    const Tensor* p[1] = {&t};
    append(op_vary, Inputs{p, 1}, a, alias);
    it->second = alias.var();
  } else {
    TensorAccess::set_var(alias, it->second, serial_);
  }
  return alias;
}

void TapeImpl::record(const OpDef& op, Inputs in, const Attrs& attrs, Tensor& out) {
  if (op.lane && append_lane(op, in, out)) return;  // small contiguous elementwise calls (tape_lane.cpp)
  const uint16_t id = sharding_of_call(in.p, in.n);
  if (id == 0) [[likely]] {
    append(op, in, attrs, out);
    return;
  }
  record_sharded(op, in, attrs, out, id);
}

// Out of line: the eager path above stays a loop and a jump.
void TapeImpl::record_sharded(const OpDef& op, Inputs in, const Attrs& attrs, Tensor& out, uint16_t id) {
  std::vector<Tensor> alias(static_cast<size_t>(in.n));
  std::vector<const Tensor*> p(static_cast<size_t>(in.n));
  for (int i = 0; i < in.n; ++i) {
    const bool diff = !(i < 31 && (op.nondiff & (1u << i)));
    alias[static_cast<size_t>(i)] = diff && in[i].shard_id() == 0 && is_tracked(in[i]) ? varying(in[i], id) : in[i];
    p[static_cast<size_t>(i)] = &alias[static_cast<size_t>(i)];
  }
  append(op, Inputs{p.data(), in.n}, attrs, out);
}


void TapeImpl::record_custom(std::shared_ptr<CustomNode> node, const std::vector<Tensor>& given,
                             std::vector<Tensor>& outputs) {
  uint16_t id = 0;
  for (const Tensor& t : given) id |= t.shard_id();
  std::vector<Tensor> aliased;
  if (id != 0) {
    aliased = given;
    for (Tensor& t : aliased)
      if (t.shard_id() == 0 && is_tracked(t)) t = varying(t, id);
  }
  const std::vector<Tensor>& inputs = id != 0 ? aliased : given;
  check_growth();
  const int32_t rid = static_cast<int32_t>(a_.records.size());
  if (g_source) a_.sources.emplace_back(rid, g_source);
  Record r{&kCustomOp, static_cast<int32_t>(a_.customs.size()), -1, static_cast<int32_t>(a_.inputs.size()),
           static_cast<int32_t>(inputs.size()), static_cast<int32_t>(a_.saved.size())};
  for (const Tensor& t : inputs) a_.inputs.push_back(is_tracked(t) ? t.var() : -1);
  for (Tensor& t : outputs) {
    const int32_t v = new_var(t, rid);
    if (r.out < 0) r.out = v;
    TensorAccess::set_var(t, v, serial_);
  }
  residual_bytes_ += node->residual_bytes();
  a_.customs.push_back({std::move(node), r.out, static_cast<int32_t>(outputs.size()), id});
  a_.records.push_back(r);
}

// A node that took replicated inputs through varying aliases sends its reverse contributions to
// them as this rank's part, summed over ranks once at the aliases. An output without the sharded
// axis (a carry of replicated values) has the same, global cotangent on every rank: each rank
// passes 1/ranks of it, so that the sum over ranks counts it once.
void TapeImpl::share_whole_cotangents(const CustomEntry& c, std::vector<Tensor>& cot) const {
  const detail::Sharding& s = sharding_of(c.shard);
  const int ranks = s.comm.size();
  if (ranks == 1) return;
  for (int32_t k = 0; k < c.n_out; ++k) {
    Tensor& ct = cot[static_cast<size_t>(k)];
    if (ct.defined() && !var_axes(c.first_out + k).contains(s.axis)) ct = ct * (1.0 / ranks);
  }
}

void TapeImpl::run_custom(const Record& r) {
  const CustomEntry& c = a_.customs[static_cast<size_t>(r.attrs)];
  std::vector<Tensor> cot(static_cast<size_t>(c.n_out)), adj(static_cast<size_t>(r.n_inputs));
  bool any = false;
  for (int32_t k = 0; k < c.n_out; ++k) {
    unlane(c.first_out + k);
    cot[static_cast<size_t>(k)] = a_.adjoints[static_cast<size_t>(c.first_out + k)];
    any |= cot[static_cast<size_t>(k)].defined();
  }
  if (!any) return;
  if (batch_.rank() > 0 && !c.node->batched_vjp())
    throw AutodiffError(std::string("[grad] the VJP of '") + c.node->name() + "' cannot take the batch axes " +
                        batch_.describe() + " of the cotangent; compute one VJP per cotangent instead");
  if (!a_.partial.empty()) offer_ranges(c);
  if (c.shard != 0) share_whole_cotangents(c, cot);
  for (int32_t i = 0; i < r.n_inputs; ++i) {
    const int32_t v = a_.inputs[static_cast<size_t>(r.first_input + i)];
    if (v >= 0) adj[static_cast<size_t>(i)] = adjoint(v);
  }
  c.node->vjp(cot, adj);
}

std::vector<Tensor> TapeImpl::gradient(const Tensor& output, const std::vector<Tensor>& wrt,
                                       const Tensor& cotangent) {
  std::vector<int32_t> wrt_vars;
  for (size_t k = 0; k < wrt.size(); ++k) wrt_vars.push_back(var_of(wrt[k], "a tensor to differentiate with respect to"));
  PauseRecording pause;
  a_.adjoints.reset(a_.vars.size());
  a_.lane_adjoints.assign(a_.vars.size(), nullptr);
  a_.arena.reset();
  a_.lent.assign(a_.vars.size(), 0);
  a_.partial.clear();
  adjoint_buffers_ = adjoint_bytes_ = 0;
  batch_ = cotangent_batch_axes(output, cotangent);
  // Rules that take batch axes, and the finite checks, see tensors: records by value then run
  // their tensor rules on copies of their residuals.
  lane_sweep_ = batch_.rank() == 0 && !check_finite_enabled();
  if (output.defined() && output.var() >= 0 && output.tape_serial() == serial_) {
    seed(output, cotangent);
    LocalSweep local;
    sweep();
  }
  std::vector<Tensor> out;
  for (int32_t v : wrt_vars) {
    unlane(v);
    const Tensor& a = a_.adjoints[static_cast<size_t>(v)];
    // A lent adjoint (a broadcast view) is handed out as a dense buffer of its own.
    out.push_back(a.defined() ? owned(v) : new_adjoint(v));
    // Sharded like the tensor (a sharded one's gradient is this rank's block), whatever views the
    // rules made on the way.
    out.back() = with_shard(out.back(), wrt[out.size() - 1].shard_id());
  }
  partial_adjoints_ = static_cast<int64_t>(a_.partial.size());
  a_.adjoints.clear();
  a_.lane_adjoints.clear();
  a_.arena.reset();
  a_.lent.clear();
  a_.partial.clear();
  batch_ = Axes();
  for (Tensor& t : lane_held_) t = Tensor();
  return out;
}

// The cotangent's axes beyond the output's (one VJP per index of them); checks the cotangent
// covers the output, or that there is none for a one-element output.
Axes TapeImpl::cotangent_batch_axes(const Tensor& output, const Tensor& cotangent) {
  Axes batch;
  if (!cotangent.defined()) {
    if (!output.defined() || output.numel() != 1)
      throw AutodiffError("[grad] the output " + output.axes().describe() +
                          " is not a scalar; reduce it (e.g. sum) or pass a cotangent");
    if (is_complex(output.dtype()))
      throw DTypeError(std::string("[grad] the output is ") + dtype_name(output.dtype()) +
                       "; a gradient needs a real loss (take real(), abs() or a squared modulus) or pass a "
                       "cotangent to vjp (docs/complex.md)");
    return batch;
  }
  bool covers = output.defined();
  for (int i = 0; covers && i < output.rank(); ++i) {
    const int j = cotangent.axes().index_of(output.axes().name(i));
    covers = j >= 0 && cotangent.axes().size(j) == output.axes().size(i);
  }
  if (!covers)
    throw ShapeError("[grad] the cotangent " + cotangent.axes().describe() + " must have the output's axes " +
                     output.axes().describe() + " (and may add batch axes)");
  for (int i = 0; i < cotangent.rank(); ++i)
    if (!output.axes().contains(cotangent.axes().name(i))) batch.push_back(cotangent.axes()[i]);
  return batch;
}

// The output's adjoint: the cotangent, or 1 — lent (nothing copied; a rule that would add to it
// copies it first).
void TapeImpl::seed(const Tensor& output, const Tensor& cotangent) {
  const VarInfo& out = var(output.var());
  const Tensor seed =
      cotangent.defined() ? astype(cotangent, out.dtype) : full(output.axes(), 1.0, out.dtype, out.device);
  if (!lend_adjoint(output.var(), seed)) accumulate(adjoint(output.var()), seed);
}

// Every record's reverse rule, last first; a NumericError names the model node that made the op.
void TapeImpl::sweep() {
  for (size_t k = a_.records.size(); k-- > 0;) {
    const Record& r = a_.records[k];
    try {
      if (r.lane_n != 0 && lane_sweep_) {
        lane_vjp(r);
        continue;
      }
      if (r.op == &kCustomOp) {
        run_custom(r);
        continue;
      }
      if (r.op->collective_vjp) (void)adjoint(r.out);  // every rank takes part, with zeros if need be
      if (r.op->view || !has_adjoint(r.out)) continue;
      if (batch_.rank() > 0 && !r.op->batched_vjp)
        throw AutodiffError(std::string("[grad] the VJP of '") + r.op->name + "' cannot take the batch axes " +
                            batch_.describe() + " of the cotangent; compute one VJP per cotangent instead");
      SweepContext ctx(*this, r, keep_all_, nullptr);
      r.op->vjp(ctx);
      if (check_finite_enabled()) check_adjoints(r);
    } catch (const NumericError&) {
      if (a_.sources.empty()) throw;
      rethrow_with_source(static_cast<int32_t>(k));
    }
  }
}

Tensor TapeImpl::forward_tangent(const Tensor& output, const std::vector<Tensor>& inputs,
                                 const std::vector<Tensor>& tangents) {
  if (!keep_all_) throw AutodiffError("[jvp] internal: the tape did not keep the residuals forward mode needs");
  if (inputs.size() != tangents.size())
    throw AutodiffError("[jvp] " + std::to_string(inputs.size()) + " inputs but " + std::to_string(tangents.size()) +
                        " tangents");
  PauseRecording pause;
  LocalSweep local;
  std::vector<Tensor> tan(a_.vars.size());
  Axes batch;  // axes every given tangent has beyond its primal's
  bool first = true;
  for (size_t k = 0; k < inputs.size(); ++k) {
    int32_t v = var_of(inputs[k], "a primal");
    if (!tangents[k].defined()) continue;
    const Axes& ta = tangents[k].axes();
    const Axes& pa = inputs[k].axes();
    bool covers = true;
    for (int i = 0; i < pa.rank(); ++i) {
      const int j = ta.index_of(pa.name(i));
      covers = covers && j >= 0 && ta.size(j) == pa.size(i);
    }
    const Axes extra = batch_axes_of(tangents[k], pa);
    if (!covers)
      throw ShapeError("[jvp] tangent " + std::to_string(k) + " " + ta.describe() +
                       " must have its primal's axes " + pa.describe() + " (and may add batch axes)");
    if (!first && !(extra.same_set(batch) && extra.rank() == batch.rank()))
      throw ShapeError("[jvp] tangent " + std::to_string(k) + " " + ta.describe() + " has the batch axes " +
                       extra.describe() + " but an earlier tangent has " + batch.describe() +
                       "; every tangent must add the same batch axes");
    batch = extra;
    first = false;
    tan[static_cast<size_t>(v)] = astype(tangents[k], inputs[k].dtype());
  }
  const bool tracked = output.var() >= 0 && output.tape_serial() == serial_;
  const std::vector<CotangentRange> demand = tangent_demand(tracked ? output.var() : -1);
  for (const Record& r : a_.records) {
    if (!needed(r, demand)) continue;
    if (r.op == &kCustomOp) {
      custom_tangent(r, tan, batch, demand);
      continue;
    }
    if (batch.rank() > 0 && !r.op->batched_jvp)
      throw AutodiffError(std::string("[jvp] the JVP of '") + r.op->name + "' cannot take the batch axes " +
                          batch.describe() + " of the tangents; compute one JVP per tangent instead");
    bool any = false;
    for (int i = 0; i < r.n_inputs; ++i) {
      int32_t v = a_.inputs[static_cast<size_t>(r.first_input + i)];
      any |= v >= 0 && tan[static_cast<size_t>(v)].defined();
    }
    if (!any) continue;
    SweepContext ctx(*this, r, true, &tan);
    if (r.op->view && batch.rank() == 0) {  // a view of the tangent (its rule would make the same)
      Tensor t = ctx.tangent(0);
      const Tensor* parent_tangent = &t;
      tan[static_cast<size_t>(r.out)] = r.op->forward(Inputs{&parent_tangent, 1}, attrs_of(r));
    } else {
      tan[static_cast<size_t>(r.out)] = r.op->jvp(ctx);
    }
  }
  Axes out_axes = output.axes();
  for (int i = 0; i < batch.rank(); ++i) out_axes.push_back(batch[i]);
  // Sharded like the output (this rank's block).
  if (tracked && tan[static_cast<size_t>(output.var())].defined())
    return with_shard(tan[static_cast<size_t>(output.var())], output.shard_id());
  return with_shard(zeros(out_axes, output.dtype(), output.device()), output.shard_id());
}

// A custom node's outputs' tangents, from its inputs'; an AutodiffError where it has no forward mode.
void TapeImpl::custom_tangent(const Record& r, std::vector<Tensor>& tan, const Axes& batch,
                              const std::vector<CotangentRange>& demand) {
  const CustomEntry& c = a_.customs[static_cast<size_t>(r.attrs)];
  std::vector<Tensor> in(static_cast<size_t>(r.n_inputs)), out;
  bool any = false;
  for (int i = 0; i < r.n_inputs; ++i) {
    const int32_t v = a_.inputs[static_cast<size_t>(r.first_input + i)];
    if (v >= 0) in[static_cast<size_t>(i)] = tan[static_cast<size_t>(v)];
    any = any || in[static_cast<size_t>(i)].defined();
  }
  if (!any) return;
  offer_tangent_ranges(c, demand);
  if (!c.node->jvp(in, batch, out))
    throw AutodiffError(std::string("[jvp] forward mode through ") + c.node->name() +
                        " is not supported yet; use reverse mode (grad, vjp)");
  for (int32_t k = 0; k < c.n_out && static_cast<size_t>(k) < out.size(); ++k)
    tan[static_cast<size_t>(c.first_out + k)] = out[static_cast<size_t>(k)];
}

TapeStats TapeImpl::stats() const {
  return {static_cast<int64_t>(a_.records.size()), static_cast<int64_t>(a_.vars.size()), residual_bytes_,
          adjoint_buffers_, adjoint_bytes_, partial_adjoints_, lane_records_};
}

int64_t TapeImpl::bytes() const {
  return static_cast<int64_t>(a_.records.capacity() * sizeof(Record) + a_.inputs.capacity() * sizeof(int32_t) +
                              a_.saved.capacity() * sizeof(Tensor) + a_.vars.capacity() * sizeof(VarInfo) +
                              a_.axes.capacity() * sizeof(Axes) + a_.attrs.capacity() * sizeof(Attrs)) +
         residual_bytes_;
}

namespace {
// The public tapes alive on this thread, oldest first, each with the recording state it replaced
// (restored when it ends). Tapes may end in any order: one that ends while a newer tape records
// hands its saved state to the tape that had saved it.
struct LiveTape {
  TapeImpl* impl;
  RecordState previous;
};
// Tapes that ended while a library guard (grad, scan, map calling the user's function) held them as
// the state to restore: kept alive until that guard restores, which takes their saved state instead.
struct Orphan {
  std::unique_ptr<TapeImpl> impl;
  RecordState previous;
};
// The flag outlives the lists (trivially destructible): a tape ending during thread exit, after
// them, only restores its state.
thread_local bool t_tapes_gone = false;
struct ThreadTapes {
  std::vector<LiveTape> live;
  std::vector<Orphan> orphans;
  ~ThreadTapes() { t_tapes_gone = true; }
};
ThreadTapes& thread_tapes() {
  thread_local ThreadTapes t;
  return t;
}
}  // namespace

void restore_record_state(const RecordState& previous) {
  RecordState s = previous;
  if (!t_tapes_gone) {
    std::vector<Orphan>& orphans = thread_tapes().orphans;
    for (auto it = orphans.begin(); it != orphans.end();) {
      if (s.recorder == it->impl.get()) {
        s = it->previous;
        orphans.erase(it);
        it = orphans.begin();  // the orphan's own previous state may be an orphan too
      } else {
        ++it;
      }
    }
  }
  g_record_state = s;
}

// A public tape starts: it records from now on.
void begin_tape(TapeImpl* impl) {
  if (!t_tapes_gone) thread_tapes().live.push_back({impl, g_record_state});
  g_record_state = {impl, impl->serial()};
}

// A public tape ends. When a guard still holds it, `impl` moves to the orphans (freed when the
// guard restores); otherwise the caller frees it.
void end_tape(std::unique_ptr<TapeImpl>& impl) {
  if (t_tapes_gone) {
    if (g_record_state.recorder == impl.get()) g_record_state = {};
    return;
  }
  std::vector<LiveTape>& live = thread_tapes().live;
  auto self = std::find_if(live.begin(), live.end(), [&](const LiveTape& t) { return t.impl == impl.get(); });
  if (self == live.end()) return;
  const RecordState previous = self->previous;
  live.erase(self);
  if (g_record_state.recorder == impl.get()) {
    restore_record_state(previous);
    return;
  }
  for (LiveTape& t : live)
    if (t.previous.recorder == impl.get()) {
      t.previous = previous;  // a newer tape ends into what this one had replaced
      return;
    }
  // Neither recording nor saved by a newer tape: a guard of the library holds it.
  thread_tapes().orphans.push_back({std::move(impl), previous});
}

RecordingScope::RecordingScope(TapeImpl* tape) : previous_(g_record_state) {
  g_record_state = {tape, tape ? tape->serial() : 0};
}
RecordingScope::~RecordingScope() { restore_record_state(previous_); }

PauseRecording::PauseRecording() : previous_(g_record_state) { g_record_state = {}; }
PauseRecording::~PauseRecording() { restore_record_state(previous_); }

uint32_t new_serial() {
  static std::atomic<uint32_t> serial{0};
  uint32_t s = serial.fetch_add(1, std::memory_order_relaxed) + 1;
  return s == 0 ? serial.fetch_add(1, std::memory_order_relaxed) + 1 : s;
}

std::unique_ptr<TapeImpl> new_tape() { return std::make_unique<TapeImpl>(new_serial()); }

}  // namespace tenax::detail

namespace tenax {

namespace {
void check_owner(uint32_t owner, const char* what) {
  if (owner != detail::thread_token())
    throw AutodiffError(std::string("[tape] ") + what +
                        " called from a thread that does not own the tape; a tape records and "
                        "differentiates on the thread that created it: create one in each task");
}
}  // namespace

Tape::Tape() : impl_(detail::new_tape()), owner_(detail::thread_token()) {
  detail::register_live_tape(impl_->serial());
  detail::begin_tape(impl_.get());
}

Tape::~Tape() {
  detail::unregister_live_tape(impl_->serial());
  if (owner_ == detail::thread_token()) {
    detail::end_tape(impl_);
  } else {
    // Destroyed on another thread: the owner's recording state may still point at it, and that
    // thread's state is not ours to change. Left allocated rather than dangling (documented misuse).
    (void)impl_.release();
  }
}

Tensor Tape::watch(const Tensor& t) {
  check_owner(owner_, "watch");
  return impl_->watch(t);
}

std::vector<Tensor> Tape::gradient(const Tensor& output, const std::vector<Tensor>& wrt, const Tensor& cotangent) {
  check_owner(owner_, "gradient");
  return impl_->gradient(output, wrt, cotangent);
}

Tensor Tape::forward_tangent(const Tensor& output, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& tangents) {
  check_owner(owner_, "forward_tangent");
  return impl_->forward_tangent(output, inputs, tangents);
}

void Tape::keep_all_residuals() {
  check_owner(owner_, "keep_all_residuals");
  impl_->keep_all();
}

void Tape::set_residual_budget(int64_t bytes) {
  check_owner(owner_, "set_residual_budget");
  if (bytes < 0) throw AutodiffError("[set_residual_budget] a budget of " + std::to_string(bytes) + " bytes; expected >= 0");
  impl_->set_residual_budget(bytes);
}
TapeStats Tape::stats() const { return impl_->stats(); }
int64_t Tape::bytes() const { return impl_->bytes(); }

}  // namespace tenax
