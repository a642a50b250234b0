// The collective ops and the sharding rule every op call with a sharded operand goes through.
#include "tenax/core/ops/collective.h"

#include <string>
#include <vector>

#include "tenax/core/distributed_impl.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/capture.h"
#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {
namespace {

Transport& transport_of(const Attrs& a) { return sharding_of(static_cast<uint16_t>(a.i[0])).comm.transport(); }

// A collective cannot be captured into a replayed program (the replay would skip it).
void refuse_capture(const char* op) {
  if (g_record_state.trace || g_capture)
    refuse_in_trace(op, "would communicate at every replay: reduce over the sharded axis outside the traced "
                        "function (after the scan, outside compile)");
}

Tensor all_reduce_sum_forward(Inputs in, const Attrs& a) {
  refuse_capture("all_reduce_sum");
  return all_reduce_sum(in[0], transport_of(a));
}
void all_reduce_sum_vjp(VjpContext& c) { add_to_adjoint(c, 0, c.cotangent()); }
Tensor all_reduce_sum_jvp(JvpContext& c) { return apply(op_all_reduce_sum, c.tangent(0), c.attrs()); }

Tensor all_reduce_max_forward(Inputs in, const Attrs& a) {
  refuse_capture("all_reduce_max");
  return all_reduce_max(in[0], transport_of(a));
}
// The gradient reaches every rank whose partial equals the maximum (as a local max reaches every
// element equal to it).
void all_reduce_max_vjp(VjpContext& c) {
  const Tensor& ct = c.cotangent();
  add_to_adjoint(c, 0, where(equal(c.input(0), c.output()), ct, zero_like(ct)));
}
Tensor all_reduce_max_jvp(JvpContext& c) {
  const Tensor& t = c.tangent(0);
  return apply(op_all_reduce_sum, where(equal(c.input(0), c.output()), t, zero_like(t)), c.attrs());
}

Tensor vary_forward(Inputs in, const Attrs&) { return in[0]; }
void vary_vjp(VjpContext& c) { add_to_adjoint(c, 0, all_reduce_sum(c.cotangent(), transport_of(c.attrs()))); }
Tensor vary_jvp(JvpContext& c) { return c.tangent(0); }

// The blocks of every rank, laid out with the sharded axis outermost, viewed in t's axis order.
Tensor all_gather_forward(Inputs in, const Attrs& a) {
  refuse_capture("gather");
  const Sharding& s = sharding_of(static_cast<uint16_t>(a.i[0]));
  const Tensor& t = in[0];
  AxisList order{s.axis};
  for (int i = 0; i < t.rank(); ++i)
    if (t.axes().name(i) != s.axis) order.push_back(t.axes().name(i));
  Tensor plain = with_shard(t, 0);  // this rank's block, off the tape (a forward records nothing)
  TensorAccess::set_var(plain, -1, 0);
  const Tensor local = transpose(plain, order);
  const std::vector<char> mine = host_bytes(local);
  std::vector<int64_t> counts;
  const std::vector<char> all = exchange(s.comm.transport(), mine.data(), static_cast<int64_t>(mine.size()), counts);
  Axes whole = local.axes();
  whole.set_size(0, s.global);
  const Tensor out = from_host(all.data(), whole, t.dtype(), t.device());
  return transpose(out, t.axes().names());
}
void all_gather_vjp(VjpContext& c) {
  const Sharding& s = sharding_of(static_cast<uint16_t>(c.attrs().i[0]));
  add_to_adjoint(c, 0, slice(c.cotangent(), s.axis, s.block.offset, s.block.offset + s.block.size));
}
Tensor all_gather_jvp(JvpContext& c) { return apply(op_all_gather, c.tangent(0), c.attrs()); }

}  // namespace

const OpDef op_all_reduce_sum = {.name = "all_reduce_sum",
                                 .arity = 1,
                                 .forward = all_reduce_sum_forward,
                                 .vjp = all_reduce_sum_vjp,
                                 .jvp = all_reduce_sum_jvp,
                                 .shard = ShardRule::gather,
                                 .doc = "Σ over the ranks of a communicator"};
const OpDef op_all_reduce_max = {.name = "all_reduce_max",
                                 .arity = 1,
                                 .forward = all_reduce_max_forward,
                                 .vjp = all_reduce_max_vjp,
                                 .jvp = all_reduce_max_jvp,
                                 .saves = 1u | kSaveOutput,
                                 .shard = ShardRule::gather,
                                 .doc = "the maximum over the ranks of a communicator"};
const OpDef op_vary = {.name = "vary",
                       .arity = 1,
                       .forward = vary_forward,
                       .vjp = vary_vjp,
                       .jvp = vary_jvp,
                       .collective_vjp = true,
                       .doc = "a replicated tensor entering sharded computation"};
const OpDef op_all_gather = {.name = "gather",
                             .arity = 1,
                             .forward = all_gather_forward,
                             .vjp = all_gather_vjp,
                             .jvp = all_gather_jvp,
                             .shard = ShardRule::gather,
                             .doc = "the whole of a sharded axis on every rank"};

bool names_axis(const Attrs& a, Name axis) {
  return a.axes.contains(axis) || a.axes2.contains(axis) || a.shape.contains(axis);
}

namespace {

std::string where_sharded(const Sharding& s) {
  return "'" + s.axis.str() + "' (" + std::to_string(s.global) + ", split over " + std::to_string(s.comm.size()) +
         " ranks; this rank holds " + std::to_string(s.block.offset) + ".." +
         std::to_string(s.block.offset + s.block.size) + ")";
}

// The one sharding of the call's inputs; throws when inputs are sharded differently or a
// replicated input has the sharded axis whole.
uint16_t check_shardings(const OpDef& op, Inputs in) {
  uint16_t id = 0;
  int first = -1;
  for (int i = 0; i < in.n; ++i) {
    const uint16_t s = in[i].shard_id();
    if (s == 0 || s == id) continue;
    if (id != 0)
      throw AxisError(std::string("[") + op.name + "] input " + std::to_string(first) + " is sharded along " +
                      where_sharded(sharding_of(id)) + " but input " + std::to_string(i) + " along " +
                      where_sharded(sharding_of(s)) + "; one sharded axis per computation");
    id = s;
    first = i;
  }
  const Sharding& s = sharding_of(id);
  for (int i = 0; i < in.n; ++i)
    if (in[i].shard_id() == 0 && in[i].has_axis(s.axis))
      throw AxisError(std::string("[") + op.name + "] input " + std::to_string(first) + " is sharded along " +
                      where_sharded(s) + " but input " + std::to_string(i) + " has that axis whole (" +
                      std::to_string(in[i].size(s.axis)) + "); shard it too (tenax::shard) or use a tensor "
                      "without the axis");
  return id;
}

// The result of a call that reduced over the sharded axis: the per-rank results combined.
Tensor combine_over_ranks(const OpDef& op, const Tensor& out, uint16_t id) {
  const Sharding& s = sharding_of(id);
  Attrs a;
  a.i[0] = id;
  switch (op.shard) {
    case ShardRule::sum: return apply(op_all_reduce_sum, out, a);
    case ShardRule::mean:
      return apply(op_all_reduce_sum, out * (static_cast<double>(s.block.size) / static_cast<double>(s.global)), a);
    case ShardRule::max: return apply(op_all_reduce_max, out, a);
    case ShardRule::logsumexp: {
      // max over ranks as a constant shift (its gradient cancels): m + log Σ_r exp(l_r - m)
      Tensor m = all_reduce_max(out, s.comm.transport());
      return m + log(apply(op_all_reduce_sum, exp(out - m), a));
    }
    default:
      throw AxisError(std::string("[") + op.name + "] drops the sharded axis " + where_sharded(s) +
                      " and cannot combine its ranks' results; gather the axis first (tenax::gather) if it fits one rank");
  }
}

void record(const OpDef& op, Inputs in, const Attrs& attrs, Tensor& out) {
  if (!g_record_state.recorder || !(op.vjp || g_record_state.trace)) return;
  const uint32_t skip = g_record_state.trace ? 0u : op.nondiff;
  for (int i = 0; i < in.n; ++i)
    if (!(skip & (1u << i)) && is_tracked(in[i])) {
      g_record_state.recorder->record(op, in, attrs, out);
      return;
    }
}

}  // namespace

Tensor apply_sharded(const OpDef& op, Inputs in, const Attrs& attrs) {
  const uint16_t id = check_shardings(op, in);
  const Sharding& s = sharding_of(id);
  if (op.shard == ShardRule::gather) {
    Tensor out = op.forward(in, attrs);
    record(op, in, attrs, out);
    return out;
  }
  if (op.shard == ShardRule::local && names_axis(attrs, s.axis))
    throw AxisError(std::string("[") + op.name + "] needs the whole of the sharded axis " + where_sharded(s) +
                    "; gather it first (tenax::gather) if it fits one rank, or keep the op off that axis");
  Tensor out = forward_naming_op(op, in, attrs);
  if (check_finite_enabled()) check_finite_value(out, op.name, "in the forward pass");
  record(op, in, attrs, out);
  if (!out.has_axis(s.axis)) return combine_over_ranks(op, out, id);
  if (out.size(s.axis) != s.block.size)
    throw AxisError(std::string("[") + op.name + "] changed the size of the sharded axis " + where_sharded(s) +
                    " to " + std::to_string(out.size(s.axis)));
  return with_shard(out, id);
}

}  // namespace tenax::detail
