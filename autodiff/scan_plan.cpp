// Tracing a scan body into a plan and replaying it: forwards op by op from the plan's variables,
// backwards through each op's VJP rule with adjoints allocated lazily per step (parameters
// accumulate into one buffer across all steps; views alias their parent's adjoint).
#include "tenax/autodiff/scan_plan.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "tenax/autodiff/recording.h"
#include "tenax/core/ops/collective.h"

namespace tenax::detail {

/// Records the body's op calls into a plan while it is traced.
class PlanRecorder final : public Recorder {
 public:
  PlanRecorder(ScanPlan& plan, uint32_t serial, uint32_t outer) : plan_(plan), serial_(serial), outer_(outer) {}

  int32_t new_var(VarKind kind, int32_t index, const Tensor& t) {
    plan_.vars_.push_back({kind, index, t.axes(), t.dtype()});
    plan_.viewed_.push_back(0);
    return static_cast<int32_t>(plan_.vars_.size() - 1);
  }

  Tensor watch(const Tensor& t, VarKind kind, int32_t index) {
    Tensor w = t;
    TensorAccess::set_var(w, new_var(kind, index, t), serial_);
    return w;
  }

  PlanRef ref_of(const Tensor& t) {
    if (t.var() >= 0 && t.tape_serial() == serial_) return {t.var(), -1};
    if (t.var() >= 0 && outer_ != 0 && t.tape_serial() == outer_) {
      auto it = params_.find(t.var());
      if (it != params_.end()) return {it->second, -1};
      const int32_t v = new_var(VarKind::param, static_cast<int32_t>(plan_.params_.size()), t);
      plan_.params_.push_back(t);
      plan_.param_vars_.push_back(v);
      params_.emplace(t.var(), v);
      return {v, -1};
    }
    plan_.consts_.push_back(t);
    return {-1, static_cast<int32_t>(plan_.consts_.size() - 1)};
  }

  void record(const OpDef& op, Inputs in, const Attrs& attrs, Tensor& out) override {
    PlanOp p{&op, static_cast<int32_t>(plan_.attrs_.size()), static_cast<int32_t>(plan_.inputs_.size()), in.n, -1};
    plan_.attrs_.push_back(attrs);
    for (int i = 0; i < in.n; ++i) plan_.inputs_.push_back(ref_of(in[i]));
    if (op.view && in.n > 0 && plan_.inputs_[static_cast<size_t>(p.first_input)].var >= 0)
      plan_.viewed_[static_cast<size_t>(plan_.inputs_[static_cast<size_t>(p.first_input)].var)] = 1;
    p.out = new_var(VarKind::op, static_cast<int32_t>(plan_.ops_.size()), out);
    TensorAccess::set_var(out, p.out, serial_);
    plan_.ops_.push_back(p);
  }

  void record_custom(std::shared_ptr<CustomNode> node, const std::vector<Tensor>&, std::vector<Tensor>&) override {
    refuse_in_trace(node->name(),
                    "(traced once, then replayed) is not supported yet; run it outside or restructure the loop");
  }

 private:
  ScanPlan& plan_;
  uint32_t serial_, outer_;
  std::unordered_map<int32_t, int32_t> params_;  // outer variable -> plan variable
};

namespace {

// Makes `rec` the recorder of this thread in trace mode for the guard's lifetime.
class TraceScope {
 public:
  TraceScope(Recorder* rec, uint32_t serial, uint32_t outer, const char* what, bool fallback)
      : previous_(g_record_state) {
    g_record_state = {rec, serial, outer, true, what, fallback};
  }
  ~TraceScope() { restore_record_state(previous_); }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  RecordState previous_;
};

Tensor untracked(Tensor t) {
  TensorAccess::set_var(t, -1, 0);
  return t;
}

}  // namespace

std::shared_ptr<ScanPlan> ScanPlan::trace(const ScanStepFn& body, const std::vector<Tensor>& carry,
                                          const std::vector<Tensor>& x, uint32_t outer,
                                          std::vector<Tensor>& carry_out, std::vector<Tensor>& y_out,
                                          const char* what, bool fallback) {
  auto plan = std::make_shared<ScanPlan>();
  const uint32_t serial = new_serial();
  PlanRecorder rec(*plan, serial, outer);
  plan->n_carry_ = static_cast<int>(carry.size());
  plan->n_x_ = static_cast<int>(x.size());
  std::vector<Tensor> c, xs;
  for (size_t k = 0; k < carry.size(); ++k) c.push_back(rec.watch(carry[k], VarKind::carry, static_cast<int32_t>(k)));
  for (size_t k = 0; k < x.size(); ++k) xs.push_back(rec.watch(x[k], VarKind::x, static_cast<int32_t>(k)));
  std::pair<std::vector<Tensor>, std::vector<Tensor>> res;
  {
    TraceScope scope(&rec, serial, outer, what, fallback);
    res = body(c, xs);
    for (size_t k = 0; k < res.first.size(); ++k) {
      if (!res.first[k].defined()) throw Error("[scan] carry " + std::to_string(k) + " returned by the body is undefined");
      plan->carry_out_.push_back(rec.ref_of(res.first[k]));
      plan->carry_shards_.push_back(res.first[k].shard_id());
    }
    for (size_t k = 0; k < res.second.size(); ++k) {
      if (!res.second[k].defined()) throw Error("[scan] output " + std::to_string(k) + " returned by the body is undefined");
      plan->y_out_.push_back(rec.ref_of(res.second[k]));
      plan->y_shards_.push_back(res.second[k].shard_id());
    }
  }
  carry_out.clear();
  y_out.clear();
  for (const Tensor& t : res.first) carry_out.push_back(t.tape_serial() == serial ? untracked(t) : t);
  for (const Tensor& t : res.second) y_out.push_back(t.tape_serial() == serial ? untracked(t) : t);
  return plan;
}

std::string ScanPlan::difference(const ScanPlan& o) const {
  const size_t n = std::min(ops_.size(), o.ops_.size());
  for (size_t k = 0; k < n; ++k) {
    const PlanOp &a = ops_[k], &b = o.ops_[k];
    if (a.op != b.op)
      return "op " + std::to_string(k) + " is '" + b.op->name + "' where it was '" + a.op->name + "'";
    bool same = a.n_inputs == b.n_inputs && vars_[static_cast<size_t>(a.out)].axes == o.vars_[static_cast<size_t>(b.out)].axes;
    for (int i = 0; same && i < a.n_inputs; ++i)
      same = inputs_[static_cast<size_t>(a.first_input + i)].var == o.inputs_[static_cast<size_t>(b.first_input + i)].var;
    if (!same) return "op " + std::to_string(k) + " '" + a.op->name + "' reads different inputs or makes a different shape";
  }
  if (ops_.size() != o.ops_.size())
    return std::to_string(o.ops_.size()) + " op calls where there were " + std::to_string(ops_.size());
  if (params_.size() != o.params_.size()) return "it closes over different tracked tensors";
  for (size_t k = 0; k < carry_out_.size(); ++k)
    if (carry_out_[k].var != o.carry_out_[k].var) return "carry " + std::to_string(k) + " comes from a different value";
  for (size_t k = 0; k < y_out_.size(); ++k)
    if (y_out_[k].var != o.y_out_[k].var) return "output " + std::to_string(k) + " comes from a different value";
  return {};
}

namespace {

bool same_names(const AxisList& a, const AxisList& b) {
  if (a.size() != b.size()) return false;
  for (int i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

bool same_attrs(const Attrs& a, const Attrs& b) {
  return same_names(a.axes, b.axes) && same_names(a.axes2, b.axes2) && a.shape == b.shape &&
         std::equal(a.i, a.i + 4, b.i) && std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
}

bool same_value(const Tensor& a, const Tensor& b) {
  if (a.data_ptr() == b.data_ptr() && a.axes() == b.axes() &&
      std::equal(a.strides(), a.strides() + a.rank(), b.strides()))
    return true;
  if (!(a.axes() == b.axes()) || a.dtype() != b.dtype() || a.device().kind != Device::Kind::cpu ||
      b.device().kind != Device::Kind::cpu)
    return false;
  const Tensor x = a.is_contiguous() ? a : copy_of(a), y = b.is_contiguous() ? b : copy_of(b);
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * itemsize(x.dtype())) == 0;
}

bool same_refs(const std::vector<PlanRef>& a, const std::vector<PlanRef>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].var != b[k].var || a[k].konst != b[k].konst) return false;
  return true;
}

}  // namespace

bool ScanPlan::same_as(const ScanPlan& o) const {
  if (n_carry_ != o.n_carry_ || n_x_ != o.n_x_ || vars_.size() != o.vars_.size() || ops_.size() != o.ops_.size() ||
      consts_.size() != o.consts_.size() || params_.size() != o.params_.size())
    return false;
  for (size_t v = 0; v < vars_.size(); ++v) {
    const PlanVar &a = vars_[v], &b = o.vars_[v];
    if (a.kind != b.kind || a.index != b.index || a.dtype != b.dtype || !(a.axes == b.axes)) return false;
  }
  for (size_t k = 0; k < ops_.size(); ++k) {
    const PlanOp &a = ops_[k], &b = o.ops_[k];
    if (a.op != b.op || a.n_inputs != b.n_inputs || a.out != b.out || a.first_input != b.first_input ||
        !same_attrs(attrs_[static_cast<size_t>(a.attrs)], o.attrs_[static_cast<size_t>(b.attrs)]))
      return false;
  }
  if (!same_refs(inputs_, o.inputs_) || !same_refs(carry_out_, o.carry_out_) || !same_refs(y_out_, o.y_out_) ||
      param_vars_ != o.param_vars_)
    return false;
  for (size_t k = 0; k < consts_.size(); ++k)
    if (!same_value(consts_[k], o.consts_[k])) return false;
  return true;
}

void ScanPlan::forward(std::vector<Tensor>& values) const {
  const Tensor* args[16];
  std::vector<const Tensor*> many;
  for (const PlanOp& p : ops_) {
    const Tensor** a = args;
    if (p.n_inputs > 16) {
      many.resize(static_cast<size_t>(p.n_inputs));
      a = many.data();
    }
    for (int i = 0; i < p.n_inputs; ++i) a[i] = &value(values, inputs_[static_cast<size_t>(p.first_input + i)]);
    values[static_cast<size_t>(p.out)] = p.op->forward(Inputs{a, p.n_inputs}, attrs_[static_cast<size_t>(p.attrs)]);
    if (check_finite_enabled())
      check_finite_value(values[static_cast<size_t>(p.out)], p.op->name, "in the forward pass");
  }
}

std::vector<char> ScanPlan::needs_grad(const std::vector<char>& x_needs) const {
  std::vector<char> needs(vars_.size(), 0);
  for (size_t v = 0; v < vars_.size(); ++v) {
    const PlanVar& pv = vars_[v];
    if (pv.kind == VarKind::carry || pv.kind == VarKind::param) needs[v] = is_inexact(pv.dtype);
    else if (pv.kind == VarKind::x) needs[v] = x_needs[static_cast<size_t>(pv.index)];
  }
  for (const PlanOp& p : ops_) {
    if (!p.op->vjp) continue;
    for (int i = 0; i < p.n_inputs; ++i) {
      const int32_t v = inputs_[static_cast<size_t>(p.first_input + i)].var;
      if (v >= 0 && needs[static_cast<size_t>(v)] && !(i < 31 && (p.op->nondiff & (1u << i)))) needs[static_cast<size_t>(p.out)] = 1;
    }
  }
  return needs;
}

Tensor& ScanPlan::adjoint(const std::vector<Tensor>& values, std::vector<Tensor>& adjoints, int32_t v,
                          const Axes& batch, std::vector<char>* fresh) const {
  Tensor& a = adjoints[static_cast<size_t>(v)];
  const int32_t parent = view_parent(v);
  if (a.defined()) {
    if (parent >= 0) (void)adjoint(values, adjoints, parent, batch, fresh);  // zeroes a fresh parent
    if (fresh && (*fresh)[static_cast<size_t>(v)] == kLent) {  // a contribution comes: own buffer
      (*fresh)[static_cast<size_t>(v)] = kWritten;
      const Tensor lent = a;
      a = adjoint_buffer(values, v, batch, false);
      copy_into(a, lent);
    } else if (fresh && (*fresh)[static_cast<size_t>(v)] == kFresh) {
      (*fresh)[static_cast<size_t>(v)] = 0;
      fill_zero(a);
    }
    return a;
  }
  const PlanVar& pv = vars_[static_cast<size_t>(v)];
  if (parent >= 0) {
    Tensor pa = adjoint(values, adjoints, parent, batch, fresh);
    const Tensor* in = &pa;
    const PlanOp& p = ops_[static_cast<size_t>(pv.index)];
    adjoints[static_cast<size_t>(v)] = p.op->forward(Inputs{&in, 1}, attrs_[static_cast<size_t>(p.attrs)]);
    return adjoints[static_cast<size_t>(v)];
  }
  a = adjoint_buffer(values, v, batch, true);
  return a;
}

void ScanPlan::allocate(const std::vector<Tensor>& values, std::vector<Tensor>& adjoints, int32_t v,
                        const Axes& batch, std::vector<char>& fresh) const {
  if (adjoints[static_cast<size_t>(v)].defined()) return;
  const PlanVar& pv = vars_[static_cast<size_t>(v)];
  const int32_t parent = view_parent(v);
  if (parent >= 0) {
    allocate(values, adjoints, parent, batch, fresh);
    const Tensor* in = &adjoints[static_cast<size_t>(parent)];
    const PlanOp& p = ops_[static_cast<size_t>(pv.index)];
    adjoints[static_cast<size_t>(v)] = p.op->forward(Inputs{&in, 1}, attrs_[static_cast<size_t>(p.attrs)]);
    return;
  }
  adjoints[static_cast<size_t>(v)] = adjoint_buffer(values, v, batch, false);
  fresh[static_cast<size_t>(v)] = kFresh;
}

Tensor ScanPlan::adjoint_buffer(const std::vector<Tensor>& values, int32_t v, const Axes& batch, bool zeroed) const {
  const PlanVar& pv = vars_[static_cast<size_t>(v)];
  const Device d = values[static_cast<size_t>(v)].device();
  Axes ax = pv.axes;
  for (int i = 0; i < batch.rank(); ++i) ax.push_back(batch[i]);
  return zeroed ? zeros(ax, pv.dtype, d) : empty(ax, pv.dtype, d);
}

std::vector<char> ScanPlan::read_after_step(bool by_reverse_step) const {
  std::vector<char> read(vars_.size(), 0);
  for (size_t v = 0; v < vars_.size(); ++v) read[v] = vars_[v].kind != VarKind::op;
  if (!by_reverse_step)
    for (const std::vector<PlanRef>* refs : {&carry_out_, &y_out_})
      for (const PlanRef& r : *refs)
        if (r.var >= 0) read[static_cast<size_t>(r.var)] = 1;
  for (const PlanOp& p : ops_) {
    if (p.op->saves & kSaveOutput) read[static_cast<size_t>(p.out)] = 1;
    for (int i = 0; i < p.n_inputs && i < 31; ++i)
      if ((p.op->saves & (1u << i)) && input(p, i).var >= 0) read[static_cast<size_t>(input(p, i).var)] = 1;
  }
  return read;
}

std::vector<char> ScanPlan::carries_needed_backward() const {
  std::vector<char> mark(vars_.size(), 0), needed(static_cast<size_t>(n_carry_), 0);
  auto root = [&](PlanRef r) {
    if (r.var >= 0) mark[static_cast<size_t>(r.var)] = 1;
  };
  for (const PlanOp& p : ops_) {
    if (!p.op->vjp) continue;
    if (p.op->saves & kSaveOutput) mark[static_cast<size_t>(p.out)] = 1;
    for (int i = 0; i < p.n_inputs && i < 31; ++i)
      if (p.op->saves & (1u << i)) root(input(p, i));
  }
  // What the marked values are computed from, back to the carries; a newly needed carry's new
  // value is a root too (a recomputed chunk computes the next carry from this one).
  for (bool grew = true; grew;) {
    for (size_t k = ops_.size(); k-- > 0;) {
      const PlanOp& p = ops_[k];
      if (!mark[static_cast<size_t>(p.out)]) continue;
      for (int i = 0; i < p.n_inputs; ++i) root(input(p, i));
    }
    grew = false;
    for (int c = 0; c < n_carry_; ++c)
      if (mark[static_cast<size_t>(c)] && !needed[static_cast<size_t>(c)]) {
        needed[static_cast<size_t>(c)] = 1;
        root(carry_out_[static_cast<size_t>(c)]);
        grew = true;
      }
  }
  return needed;
}

int32_t ScanPlan::view_parent(int32_t v) const {
  const PlanVar& pv = vars_[static_cast<size_t>(v)];
  if (pv.kind != VarKind::op) return -1;
  const PlanOp& p = ops_[static_cast<size_t>(pv.index)];
  return p.op->view ? inputs_[static_cast<size_t>(p.first_input)].var : -1;
}

namespace {

class PlanVjpContext final : public VjpContext {
 public:
  PlanVjpContext(const ScanPlan& plan, const PlanOp& p, const PlanRef* in, const Attrs& attrs,
                 const std::vector<Tensor>& values, std::vector<Tensor>& adjoints,
                 const std::vector<char>& needs, const Axes& batch, std::vector<char>* fresh)
      : plan_(plan),
        p_(p),
        in_(in),
        attrs_(attrs),
        values_(values),
        adjoints_(adjoints),
        needs_(needs),
        batch_(batch),
        fresh_(fresh) {}

  const Tensor& cotangent() const override { return adjoints_[static_cast<size_t>(p_.out)]; }
  // Only what the op saves, as on the tape: a replayed forward step leaves the rest unwritten
  // where it fuses (KernelProgram::allow_copy_forwarding, StepProgram::forward).
  const Tensor& input(int i) const override {
    if (i >= 31 || !(p_.op->saves & (1u << i)))
      throw AutodiffError(std::string("[") + p_.op->name + "] internal: input " + std::to_string(i) +
                          " was not saved for the reverse pass");
    return plan_.value(values_, in_[i]);
  }
  const Tensor& output() const override {
    if (!(p_.op->saves & kSaveOutput))
      throw AutodiffError(std::string("[") + p_.op->name + "] internal: the output was not saved");
    return values_[static_cast<size_t>(p_.out)];
  }
  const Axes& input_axes(int i) const override { return plan_.value(values_, in_[i]).axes(); }
  int num_inputs() const override { return p_.n_inputs; }
  bool needs_grad(int i) const override {
    const int32_t v = in_[i].var;
    return v >= 0 && needs_[static_cast<size_t>(v)] && !(i < 31 && (p_.op->nondiff & (1u << i)));
  }
  const Tensor& adjoint(int i) override {
    if (!needs_grad(i)) throw AutodiffError(std::string("[") + p_.op->name + "] internal: input needs no gradient");
    return plan_.adjoint(values_, adjoints_, in_[i].var, batch_, fresh_);
  }
  // An adjoint not written yet (allocated fresh, or not allocated: an op output's) goes to a rule
  // that writes it whole uninitialised: inside a captured step this drops its per-step zero fill.
  const Tensor& adjoint_to_write(int i, bool& fresh) override {
    fresh = false;
    const int32_t v = in_[i].var;
    for (int k = 0; k < p_.n_inputs; ++k)
      if (k != i && in_[k].var == v) return adjoint(i);
    if (!needs_grad(i)) return adjoint(i);
    if (plan_.view_parent(v) >= 0) {
      // A view that covers its parent one to one, down to the root (rename, transpose, a slice or
      // broadcast that keeps every element once), of a root adjoint not written yet: the rule
      // writes the root whole through it instead of accumulating into a zero-filled root.
      int32_t root = v;
      bool one_to_one = true;
      for (int32_t up = plan_.view_parent(root); up >= 0 && one_to_one; up = plan_.view_parent(root)) {
        one_to_one = plan_.var(root).axes.numel() == plan_.var(up).axes.numel();
        root = up;
      }
      const auto r = static_cast<size_t>(root);
      if (!one_to_one || !fresh_ || !adjoints_[r].defined() || (*fresh_)[r] != kFresh) return adjoint(i);
      (*fresh_)[r] = 0;
      fresh = true;
      return plan_.adjoint(values_, adjoints_, v, batch_, fresh_);
    }
    Tensor& a = adjoints_[static_cast<size_t>(v)];
    if (a.defined()) {
      if (fresh_ && (*fresh_)[static_cast<size_t>(v)] == kLent) return adjoint(i);
      if (!fresh_ || !(*fresh_)[static_cast<size_t>(v)]) return a;
      (*fresh_)[static_cast<size_t>(v)] = 0;
      fresh = true;
      return a;
    }
    if (plan_.var(v).kind != VarKind::op) return adjoint(i);
    a = plan_.adjoint_buffer(values_, v, batch_, false);
    fresh = true;
    return a;
  }
  bool lends() const override { return fresh_ != nullptr; }
  // The value (the cotangent of add or sub, contiguous with the adjoint's own axes and order) as
  // input i's adjoint, where i is an intermediate whose adjoint nothing has written yet, read by
  // no view, not taken twice by this op and not an output of the step (whose adjoints the
  // passes read and seed outside the rules).
  bool lend_adjoint(int i, const Tensor& value) override {
    if (!fresh_ || !needs_grad(i)) return false;
    const int32_t v = in_[i].var;
    const auto vi = static_cast<size_t>(v);
    if (plan_.var(v).kind != VarKind::op || plan_.view_parent(v) >= 0 || plan_.viewed(v)) return false;
    for (int k = 0; k < p_.n_inputs; ++k)
      if (k != i && in_[k].var == v) return false;
    for (const std::vector<PlanRef>* refs : {&plan_.carry_out(), &plan_.y_out()})
      for (const PlanRef& r : *refs)
        if (r.var == v) return false;
    if (adjoints_[vi].defined() && (*fresh_)[vi] != kFresh) return false;
    Axes want = plan_.var(v).axes;
    for (int d = 0; d < batch_.rank(); ++d) want.push_back(batch_[d]);
    if (!(value.axes() == want) || !value.is_contiguous() || value.dtype() != plan_.var(v).dtype ||
        (values_[vi].defined() && value.device() != values_[vi].device()))
      return false;
    adjoints_[vi] = value;
    (*fresh_)[vi] = kLent;
    return true;
  }
  const Attrs& attrs() const override { return attrs_; }

 private:
  const ScanPlan& plan_;
  const PlanOp& p_;
  const PlanRef* in_;
  const Attrs& attrs_;
  const std::vector<Tensor>& values_;
  std::vector<Tensor>& adjoints_;
  const std::vector<char>& needs_;
  const Axes& batch_;
  std::vector<char>* fresh_;
};

}  // namespace

namespace {

class PlanJvpContext final : public JvpContext {
 public:
  PlanJvpContext(const ScanPlan& plan, const PlanOp& p, const Attrs& attrs, const std::vector<Tensor>& values,
                 const std::vector<Tensor>& tangents)
      : plan_(plan), p_(p), attrs_(attrs), values_(values), tangents_(tangents) {}
  const Tensor& input(int i) const override { return plan_.value(values_, plan_.input(p_, i)); }
  const Tensor& output() const override { return values_[static_cast<size_t>(p_.out)]; }
  int num_inputs() const override { return p_.n_inputs; }
  const Tensor& tangent(int i) const override {
    const int32_t v = plan_.input(p_, i).var;
    return v >= 0 ? tangents_[static_cast<size_t>(v)] : none_;
  }
  const Attrs& attrs() const override { return attrs_; }

 private:
  const ScanPlan& plan_;
  const PlanOp& p_;
  const Attrs& attrs_;
  const std::vector<Tensor>& values_;
  const std::vector<Tensor>& tangents_;
  Tensor none_;
};

}  // namespace

void ScanPlan::forward_tangent(const std::vector<Tensor>& values, std::vector<Tensor>& tangents,
                               const Axes& batch) const {
  for (const PlanOp& p : ops_) {
    bool any = false;
    for (int i = 0; i < p.n_inputs; ++i) {
      const int32_t v = input(p, i).var;
      any = any || (v >= 0 && tangents[static_cast<size_t>(v)].defined());
    }
    if (!any || !p.op->jvp) continue;
    if (batch.rank() > 0 && !p.op->batched_jvp)
      throw AutodiffError(std::string("[jvp] the JVP of '") + p.op->name + "' cannot take the batch axes " +
                          batch.describe() + " of the tangents; compute one JVP per tangent instead");
    PlanJvpContext ctx(*this, p, attrs_[static_cast<size_t>(p.attrs)], values, tangents);
    tangents[static_cast<size_t>(p.out)] = p.op->jvp(ctx);
  }
}

void ScanPlan::backward(const std::vector<Tensor>& values, std::vector<Tensor>& adjoints,
                        const std::vector<char>& needs, const Axes& batch, std::vector<char>* fresh) const {
  for (size_t k = ops_.size(); k-- > 0;) {
    const PlanOp& p = ops_[k];
    if (!p.op->vjp || p.op->view || !adjoints[static_cast<size_t>(p.out)].defined()) continue;
    if (fresh && (*fresh)[static_cast<size_t>(p.out)] == kFresh) continue;  // a zero cotangent: nothing to add
    if (batch.rank() > 0 && !p.op->batched_vjp)
      throw AutodiffError(std::string("[scan] the VJP of '") + p.op->name + "' in the body cannot take the batch axes " +
                          batch.describe() + " of the cotangent; compute one VJP per cotangent instead");
    PlanVjpContext ctx(*this, p, &inputs_[static_cast<size_t>(p.first_input)],
                       attrs_[static_cast<size_t>(p.attrs)], values, adjoints, needs, batch, fresh);
    p.op->vjp(ctx);
    if (check_finite_enabled())
      for (int i = 0; i < p.n_inputs; ++i) {
        const PlanRef& in = inputs_[static_cast<size_t>(p.first_input + i)];
        int32_t root = in.var;
        while (root >= 0 && view_parent(root) >= 0) root = view_parent(root);
        if (root >= 0 && fresh && (*fresh)[static_cast<size_t>(root)] == kFresh) continue;  // not written yet
        if (in.var >= 0 && adjoints[static_cast<size_t>(in.var)].defined())
          check_finite_value(adjoints[static_cast<size_t>(in.var)], p.op->name,
                             "in the backward pass (the adjoint of its input " + std::to_string(i) + ")");
      }
  }
}

bool ScanPlan::local_along(Name axis) const {
  for (const std::vector<Tensor>* group : {&consts_, &params_})
    for (const Tensor& t : *group)
      if (t.has_axis(axis)) return false;
  for (const PlanOp& p : ops_) {
    if (p.op->shard != ShardRule::local && p.op->shard != ShardRule::layout) return false;
    if (names_axis(attrs_[static_cast<size_t>(p.attrs)], axis)) return false;
    bool in = false;
    for (int i = 0; i < p.n_inputs; ++i) {
      const PlanRef r = input(p, i);
      in = in || (r.var >= 0 ? var(r.var).axes.contains(axis) : consts_[static_cast<size_t>(r.konst)].has_axis(axis));
    }
    if (in != var(p.out).axes.contains(axis)) return false;
  }
  for (const std::vector<PlanRef>* refs : {&carry_out_, &y_out_})
    for (const PlanRef& r : *refs)
      if (r.var < 0 || !var(r.var).axes.contains(axis)) return false;
  return true;
}

}  // namespace tenax::detail
