// dot: contraction over named axes (matrix products, batched products, inner and outer products).
// The VJP contracts the cotangent straight into each operand's adjoint (no temporaries).
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/capture_rules.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/contraction.h"

namespace tenax::detail {
namespace {

void fill_group(ContractGroup& g, const Axes& axes, const Tensor& x, const Tensor& y, const Tensor& z) {
  g.rank = axes.rank();
  for (int d = 0; d < axes.rank(); ++d) {
    Name n = axes.name(d);
    g.sizes[d] = axes.size(d);
    int ix = x.axes().index_of(n), iy = y.axes().index_of(n), iz = z.axes().index_of(n);
    g.x[d] = ix < 0 ? 0 : x.strides()[ix];
    g.y[d] = iy < 0 ? 0 : y.strides()[iy];
    g.z[d] = iz < 0 ? 0 : z.strides()[iz];
  }
}

// z (+)= contraction of x and y as classified by `s`; z has s.result's axes (any order).
void run_contract(const ContractionSpec& s, const Tensor& x, const Tensor& y, const Tensor& z, bool accumulate) {
  ContractArgs a;
  a.x = x.data_ptr();
  a.y = y.data_ptr();
  a.z = z.data_ptr();
  a.accumulate = accumulate;
  fill_group(a.batch, s.batch, x, y, z);
  fill_group(a.m, s.free_x, x, y, z);
  fill_group(a.n, s.free_y, x, y, z);
  fill_group(a.k, s.summed, x, y, z);
  need(kernels(x.device()).contract[numeric_index(x.dtype(), "dot")], "dot", x.device())(a);
}

Tensor dot_forward(Inputs in, const Attrs& attrs) {
  check_numeric_operands("dot", in);
  ContractionSpec s = make_contraction(in[0].axes(), in[1].axes(), attrs.axes, "dot");
  Tensor out = empty(s.result, in[0].dtype(), in[0].device());
  run_contract(s, in[0], in[1], out, false);
  return out;
}

void dot_vjp(VjpContext& c) {
  const Tensor& g = c.cotangent();
  for (int side = 0; side < 2; ++side) {
    if (!c.needs_grad(side)) continue;
    bool fresh = false;  // the contraction writes every element of dst: a fresh one is not zeroed
    const Tensor& dst = c.adjoint_to_write(side, fresh);
    // Complex operands: the adjoint of z = x y is z̄ conj(y) (docs/complex.md).
    const Tensor& saved = c.input(1 - side);
    const Tensor other = is_complex(saved.dtype()) ? conj(saved) : saved;
    ContractionSpec s = make_contraction_to(g.axes(), other.axes(), dst.axes(), "dot vjp");
    run_contract(s, g, other, dst, !fresh);
  }
}

Tensor dot_jvp(JvpContext& c) {
  const AxisList& over = c.attrs().axes;
  Tensor out;
  if (c.tangent(0).defined()) out = dot(c.tangent(0), c.input(1), over);
  if (c.tangent(1).defined()) {
    Tensor t = dot(c.input(0), c.tangent(1), over);
    out = out.defined() ? out + t : t;
  }
  return out;
}

OpSample dot_sample(SampleRng& rng, DType dt) {
  // Split the pool into: summed, batch, free of a, free of b (each possibly empty).
  Axes all = random_axes(rng, kPoolSize);
  Axes a_axes, b_axes;
  AxisList over;
  for (int i = 0; i < all.rank(); ++i) {
    switch (rng() % 4) {
      case 0: a_axes.push_back(all[i]); b_axes.push_back(all[i]); over.push_back(all.name(i)); break;
      case 1: a_axes.push_back(all[i]); b_axes.push_back(all[i]); break;
      case 2: a_axes.push_back(all[i]); break;
      default: b_axes.push_back(all[i]); break;
    }
  }
  OpSample s{{random_values(rng, a_axes, dt, -1, 1), random_values(rng, b_axes, dt, -1, 1)}, {}};
  s.attrs.axes = over;
  return s;
}

constexpr AttrSpec kDotAttrs[] = {{"over", AttrKind::names, "the axes summed over (in both inputs)"}};
const OpDef op_dot = {.name = "dot",
                      .arity = 2,
                      .forward = dot_forward,
                      .vjp = dot_vjp,
                      .jvp = dot_jvp,
                      .saves = 3u,
                      .sample = dot_sample,
                      .complex = true,
                      .shard = ShardRule::sum,
                      .attrs = kDotAttrs,
                      .doc =
                          "Σ_over a b: the `over` axes are summed, other shared axes are batch axes; a's "
                          "remaining axes, then b's"};

}  // namespace

// ---- capture rules: this family's kernels in a scan step's captured program (capture_rules.h) ----
namespace {

template <int Dev, int Dt>
void contract_trampoline(const ContractArgs& a) {
  const ContractFn fn = real_kernels(Dev).contract[Dt];
  ContractPlanFn plan_of = nullptr;  // real dtypes only
  if constexpr (Dt < 2) plan_of = real_kernels(Dev).contract_plan[Dt];
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

template <int Dev>
void install_capture(KernelTable& t) {
  swap_in(t.contract[0], &contract_trampoline<Dev, 0>);
  swap_in(t.contract[1], &contract_trampoline<Dev, 1>);
  swap_in(t.contract[2], &contract_trampoline<Dev, 2>);
  swap_in(t.contract[3], &contract_trampoline<Dev, 3>);
}

}  // namespace

void install_dot_capture(KernelTable& capturing, int device_kind) {
  if (device_kind == 0)
    install_capture<0>(capturing);
  else
    install_capture<1>(capturing);
}

void register_dot_ops(std::vector<const OpDef*>& ops) { ops.push_back(&op_dot); }

}  // namespace tenax::detail

namespace tenax {

Tensor dot(const Tensor& a, const Tensor& b, const AxisList& over) {
  Attrs attrs;
  attrs.axes = over;
  return detail::apply(detail::op_dot, a, b, attrs);
}

}  // namespace tenax
