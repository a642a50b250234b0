// tridiagonal_solve(lower, diag, upper, rhs, over): batched tridiagonal systems along a named axis.
// Operands align by name (batch axes broadcast, an operand without `over` is constant along the
// rows); the backend kernel walks every operand through its own strides, so no layout is copied.
// VJP (implicit function theorem, residual: x only): A^T λ = x̄ through the same kernel, then
// rhs̄ = λ, diaḡ_i = -λ_i x_i, lower̄_i = -λ_i x_{i-1}, upper̄_i = -λ_i x_{i+1}, each summed over
// the axes its operand lacks. JVP: A ẋ = ṙhs - Ȧ x.
#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/capture_rules.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/align.h"

namespace tenax::detail {
namespace {

constexpr const char* kOp = "tridiagonal_solve";

Tridiagonal algorithm_of(const Attrs& attrs) {
  const int64_t a = attrs.i[0];
  if (a != 0 && a != 1)
    throw Error("[tridiagonal_solve] unknown algorithm " + std::to_string(a) + " (0 = thomas, 1 = pivoting)");
  return static_cast<Tridiagonal>(a);
}

// One kernel call over `axes` (every batch axis and `over`): the systems are `axes` without
// `over`; each operand is located by its per-system offsets and its row step (0: no `over`).
struct KernelCall {
  using Adjoints = TridiagonalArgs::Adjoints;
  Axes lanes;
  std::vector<int64_t> off[TridiagonalArgs::count], adj_off[Adjoints::slots];
  TridiagonalArgs args;
  Adjoints adj;
  Name over;

  KernelCall(const Tensor* const in[4], const Axes& axes, Name over_axis, bool transpose)
      : lanes(axes), over(over_axis) {
    lanes.erase(lanes.index_of(over));
    args.n = axes.size_of(over, kOp);
    args.systems = lanes.numel();
    args.transpose = transpose;
    for (int o = 0; o < 4; ++o) {
      bind(*in[o], off[o], args.off[o], args.step[o]);
      args.in[o] = in[o]->data_ptr();
    }
  }
  // Evenly spaced systems (the usual case) are described by their stride, else by a table.
  void bind(const Tensor& t, std::vector<int64_t>& offsets, SystemOffsets& o, int64_t& step) const {
    o = {};
    if (!batch_stride(t, lanes, o.stride)) {
      batch_offsets(t, lanes, offsets);
      o.table = offsets.data();
    }
    step = t.has_axis(over) ? t.stride(over) : 0;
  }
  // x, written by the kernel.
  void bind_out(const Tensor& x) {
    bind(x, off[TridiagonalArgs::x], args.off[TridiagonalArgs::x], args.step[TridiagonalArgs::x]);
    args.out = x.data_ptr();
  }
  // The fused reverse rule: the forward solution and the adjoints the kernel accumulates into.
  void bind_adjoint(int slot, const Tensor& t) {
    bind(t, adj_off[slot], adj.off[slot], adj.step[slot]);
    if (slot == Adjoints::solution)
      adj.x = t.data_ptr();
    else
      adj.adj[slot - Adjoints::adj_lower] = t.data_ptr();
    args.vjp = &adj;
  }
  // Runs the kernel of `d`; a failed system is a NumericError naming its batch index.
  void run(Device d, DType dt, Tridiagonal alg) {
    args.pivoting = alg == Tridiagonal::pivoting;
    const int64_t bad = need(kernels(d).tridiagonal[numeric_index(dt, kOp)], kOp, d)(args);
    if (bad < 0) return;
    const std::string where = std::string("[tridiagonal_solve] the ") +
                              (args.transpose ? "transposed " : "") + "system along '" + over.str() + "' (" +
                              std::to_string(args.n) + " rows) at batch index " + batch_index(lanes, bad);
    if (args.pivoting) throw NumericError(where + " is singular (a zero or non-finite pivot in LU)");
    throw NumericError(where +
                       " has a zero, non-finite or tiny pivot in the Thomas algorithm (tiny: the "
                       "elimination's growth would cost more than half the digits); Tridiagonal::pivoting "
                       "solves matrices that are not diagonally dominant");
  }
};

// Solves A x = rhs (or A^T x = rhs) into a new tensor with `axes` (which include every operand's
// batch axes and `over`).
Tensor solve_into(const Tensor& lower, const Tensor& diag, const Tensor& upper, const Tensor& rhs,
                  const Axes& axes, Name over, Tridiagonal alg, bool transpose) {
  Tensor x = empty(axes, rhs.dtype(), rhs.device());
  const Tensor* in[4] = {&lower, &diag, &upper, &rhs};
  KernelCall call(in, axes, over, transpose);
  call.bind_out(x);
  call.run(x.device(), x.dtype(), alg);
  return x;
}

Tensor tridiagonal_forward(Inputs in, const Attrs& attrs) {
  check_numeric_operands(kOp, in);
  const Name over = attrs.axes[0];
  const Tridiagonal alg = algorithm_of(attrs);
  // x follows rhs's axis order; the others' extra batch axes come after.
  Axes ax = align_axes(in[3].axes(), in[0].axes(), kOp, 3, 0);
  ax = align_axes(ax, in[1].axes(), kOp, 3, 1);
  ax = align_axes(ax, in[2].axes(), kOp, 3, 2);
  if (!ax.contains(over))
    throw AxisError("[tridiagonal_solve] no operand has the system axis '" + over.str() + "': lower " +
                    in[0].axes().describe() + ", diag " + in[1].axes().describe() + ", upper " +
                    in[2].axes().describe() + ", rhs " + in[3].axes().describe());
  return solve_into(in[0], in[1], in[2], in[3], ax, over, alg, false);
}

// x shifted by one row along `over`, zero-filled: x_{i-1} (by = -1) or x_{i+1} (by = +1).
Tensor shifted(const Tensor& x, Name over, int by) {
  const int64_t n = x.size(over);
  Axes one = x.axes();
  one.set_size(one.index_of(over), 1);
  Tensor z = zeros(one, x.dtype(), x.device());
  return by < 0 ? concat({z, slice(x, over, 0, n - 1)}, over) : concat({slice(x, over, 1, n), z}, over);
}

// The reverse rule in one kernel call: the transposed solve accumulates every adjoint from λ
// and x as it goes (no λ tensor, no shifted copies of x; on a CUDA device one kernel after the
// cuSPARSE solve). Needs the Thomas algorithm and each wanted adjoint to have one element per
// system and row (nothing to reduce) — or, on the CPU, one matrix shared by every system (lower,
// diag and upper without a batch axis), whose adjoints along `over` the kernel sums over the
// systems itself (TridiagonalArgs::Adjoints).
bool fused_vjp(VjpContext& c, const Axes& lam_axes, Name over) {
  if (algorithm_of(c.attrs()) != Tridiagonal::thomas || is_complex(c.output().dtype())) return false;
  auto along_rows_only = [&](int i) { return c.input_axes(i).rank() == 1 && c.input_axes(i).contains(over); };
  bool shared = c.output().device() == Device::cpu();
  for (int i = 0; i < 3; ++i) shared = shared && (c.input_axes(i).rank() == 0 || along_rows_only(i));
  for (int i = 0; i < 4; ++i)
    if (c.needs_grad(i) && !c.input_axes(i).same_set(lam_axes) && !(shared && i < 3 && along_rows_only(i)))
      return false;
  const Tensor* in[4] = {&c.input(0), &c.input(1), &c.input(2), &c.cotangent()};
  KernelCall call(in, lam_axes, over, true);
  call.bind_adjoint(KernelCall::Adjoints::solution, c.output());
  for (int i = 0; i < 4; ++i)
    if (c.needs_grad(i)) {
      // Each wanted adjoint has lam_axes (or is a shared row): the kernel writes every element,
      // so a fresh one is written rather than zero-filled and added to.
      bool fresh = false;
      call.bind_adjoint(KernelCall::Adjoints::adj_lower + i, c.adjoint_to_write(i, fresh));
      call.adj.assign[i] = fresh;
    }
  call.run(c.output().device(), c.output().dtype(), Tridiagonal::thomas);
  return true;
}

void tridiagonal_vjp(VjpContext& c) {
  const Tensor &lower = c.input(0), &diag = c.input(1), &upper = c.input(2);
  const Tensor& x = c.output();
  const Tensor& g = c.cotangent();
  const Name over = c.attrs().axes[0];
  // λ over the cotangent's axes: a batched cotangent (several VJPs at once) adds batch axes.
  Axes lam_axes = align_axes(g.axes(), x.axes(), kOp);
  if (fused_vjp(c, lam_axes, over)) return;
  // Complex systems (docs/complex.md): λ = A^{-H} x̄ = conj(A^{-T} conj(x̄)), and the products below
  // take conj(x).
  const bool cx = is_complex(x.dtype());
  const Tensor lam = cx ? conj(solve_into(lower, diag, upper, conj(g), lam_axes, over, algorithm_of(c.attrs()), true))
                        : solve_into(lower, diag, upper, g, lam_axes, over, algorithm_of(c.attrs()), true);
  const Tensor xc = cx ? conj(x) : x;
  if (c.needs_grad(3)) add_to_adjoint(c, 3, lam);
  // -Σ l·y over the axes input k lacks (a shared coefficient, a constant row), into input k's
  // adjoint, or into its rows from `row` on when it has `over` and l, y are row slices. The
  // sum is a contraction: one pass over l and y, no full-size product, negation or shifted copy.
  auto product_into = [&](int k, const Tensor& l, const Tensor& y, int64_t row) {
    AxisList summed;
    for (int d = 0; d < x.rank(); ++d)
      if (!c.input_axes(k).contains(x.axes().name(d))) summed.push_back(x.axes().name(d));
    const Tensor v = neg(summed.empty() ? l * y : dot(l, y, summed));
    if (!v.has_axis(over) || v.size(over) == x.size(over))
      add_to_adjoint(c, k, v);
    else
      accumulate(slice(c.adjoint(k), over, row, row + v.size(over)), v);
  };
  const int64_t n = x.size(over);
  if (c.needs_grad(1)) product_into(1, lam, xc, 0);
  if (n < 2) return;  // a 1x1 system has no off-diagonal entries
  // lower̄_i = -λ_i x_{i-1} (i >= 1), upper̄_i = -λ_i x_{i+1} (i <= n - 2); the others stay zero.
  if (c.needs_grad(0)) product_into(0, slice(lam, over, 1, n), slice(xc, over, 0, n - 1), 1);
  if (c.needs_grad(2)) product_into(2, slice(lam, over, 0, n - 1), slice(xc, over, 1, n), 0);
}

Tensor tridiagonal_jvp(JvpContext& c) {
  const Tensor& x = c.output();
  const Name over = c.attrs().axes[0];
  Tensor rhs = c.tangent(3);
  auto subtract = [&rhs](const Tensor& term) { rhs = rhs.defined() ? rhs - term : neg(term); };
  if (c.tangent(1).defined()) subtract(c.tangent(1) * x);
  if (x.size(over) >= 2) {
    if (c.tangent(0).defined()) subtract(c.tangent(0) * shifted(x, over, -1));
    if (c.tangent(2).defined()) subtract(c.tangent(2) * shifted(x, over, +1));
  }
  if (!rhs.defined()) return rhs;
  return tridiagonal_solve(c.input(0), c.input(1), c.input(2), rhs, over,
                           static_cast<Tridiagonal>(c.attrs().i[0]));
}

// Diagonally dominant systems (|diag| >= 2 + |lower| + |upper|) along "t", operands on random
// subsets of the batch axes, sometimes without "t" (a constant row), either algorithm.
OpSample tridiagonal_sample(SampleRng& rng, DType dt) {
  Axes base = random_axes(rng, int(rng() % 3));
  const Axis rows{"t", 1 + int64_t(rng() % 6)};
  auto axes_of = [&](bool may_drop_rows) {
    Axes a = random_subset(rng, base);
    if (!may_drop_rows || rng() % 4 != 0) a.push_back(rows);
    return a;
  };
  Tensor lower = random_values(rng, axes_of(true), dt, -1, 1);
  // Complex entries carry imaginary parts up to the real parts' width: a larger diagonal keeps it dominant.
  Tensor diag = random_values(rng, axes_of(true), dt, is_complex(dt) ? 3.5 : 2.5, is_complex(dt) ? 5 : 4);
  Tensor upper = random_values(rng, axes_of(true), dt, -1, 1);
  Axes rhs_axes;  // rows innermost or outermost
  const bool rows_first = rng() % 2 == 0;
  if (rows_first) rhs_axes.push_back(rows);
  for (int d = 0; d < base.rank(); ++d) rhs_axes.push_back(base[d]);
  if (!rows_first) rhs_axes.push_back(rows);
  OpSample s{{lower, diag, upper, random_values(rng, rhs_axes, dt, -1, 1)}, {}};
  s.attrs.axes = AxisList{"t"};
  s.attrs.i[0] = int64_t(rng() % 2);
  return s;
}

constexpr AttrSpec kTridiagonalAttrs[] = {
    {"over", AttrKind::name, "the axis the systems lie along"},
    {"pivoting", AttrKind::boolean, "false: Thomas; true: LU with partial pivoting", 0, false, 0}};
const OpDef op_tridiagonal_solve = {
    .name = kOp,
    .arity = 4,
    .forward = tridiagonal_forward,
    .vjp = tridiagonal_vjp,
    .jvp = tridiagonal_jvp,
    .saves = 1u | 2u | 4u | kSaveOutput,
    .sample = tridiagonal_sample,
    .complex = true,
    .attrs = kTridiagonalAttrs,
    .doc = "solves the tridiagonal systems (lower, diag, upper) x = rhs along `over`"};

}  // namespace

// ---- capture rules: this family's kernels in a scan step's captured program (capture_rules.h) ----
namespace {

template <int Dev, int Dt>
int64_t tridiagonal_trampoline(const TridiagonalArgs& a) {
  const TridiagonalFn fn = real_kernels(Dev).tridiagonal[Dt];
  using S = TridiagonalArgs::Adjoints;
  LaneCopy lc;
  // Offset tables (systems not evenly spaced) are copied; a stride travels in the arguments.
  for (int o = 0; o < TridiagonalArgs::count; ++o) lc.take(o, a.off[o].table, a.systems);
  // The fused reverse rule's offsets, owned by the recorded call too.
  auto vjp = a.vjp ? std::make_shared<S>(*a.vjp) : nullptr;
  auto vjp_off = std::make_shared<std::vector<int64_t>[]>(S::slots);
  if (vjp)
    for (int k = 0; k < S::slots; ++k)
      if (vjp->off[k].table) {
        vjp_off[k].assign(vjp->off[k].table, vjp->off[k].table + a.systems);
        vjp->off[k].table = vjp_off[k].data();
      }
  // The arguments in a block of their own that the replay reads, so that read_in_place can point
  // the operands it only reads elsewhere per step (movable_reads).
  auto args = std::make_shared<TridiagonalArgs>(a);
  const int64_t bad = g_capture->other(
      [fn, args, lc, vjp, vjp_off] {
        TridiagonalArgs c = *args;
        for (int o = 0; o < TridiagonalArgs::count; ++o)
          if (c.off[o].table) c.off[o].table = lc.at(o);
        c.vjp = vjp.get();
        return fn(c);
      },
      "tridiagonal_solve");
  if constexpr (Dev == 0) {  // its tensors, for the host passes and read_in_place (null ones skipped)
    g_capture->touches({a.in[0], a.in[1], a.in[2], a.in[3], a.out, vjp ? vjp->x : nullptr,
                        vjp ? vjp->adj[0] : nullptr, vjp ? vjp->adj[1] : nullptr, vjp ? vjp->adj[2] : nullptr,
                        vjp ? vjp->adj[3] : nullptr});
    g_capture->movable_reads(
        {&args->in[0], &args->in[1], &args->in[2], &args->in[3], vjp ? &vjp->x : nullptr});
  }
  return bad;
}

template <int Dev>
void install_capture(KernelTable& t) {
  swap_in(t.tridiagonal[0], &tridiagonal_trampoline<Dev, 0>);
  swap_in(t.tridiagonal[1], &tridiagonal_trampoline<Dev, 1>);
  swap_in(t.tridiagonal[2], &tridiagonal_trampoline<Dev, 2>);
  swap_in(t.tridiagonal[3], &tridiagonal_trampoline<Dev, 3>);
}

}  // namespace

void install_tridiagonal_capture(KernelTable& capturing, int device_kind) {
  if (device_kind == 0)
    install_capture<0>(capturing);
  else
    install_capture<1>(capturing);
}

void register_tridiagonal_ops(std::vector<const OpDef*>& ops) { ops.push_back(&op_tridiagonal_solve); }

}  // namespace tenax::detail

namespace tenax {

Tensor tridiagonal_solve(const Tensor& lower, const Tensor& diag, const Tensor& upper, const Tensor& rhs,
                         Name over, Tridiagonal algorithm) {
  Attrs attrs;
  attrs.axes = AxisList{over};
  attrs.i[0] = static_cast<int64_t>(algorithm);
  const Tensor* p[4] = {&lower, &diag, &upper, &rhs};
  return detail::apply(detail::op_tridiagonal_solve, Inputs{p, 4}, attrs);
}

}  // namespace tenax
