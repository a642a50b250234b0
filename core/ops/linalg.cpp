// Small dense linear algebra over a (row, col) pair of axes, batched over every other axis:
// cholesky, triangular_solve, solve, logdet. Reverse rules by the implicit function theorem
// (solves reuse the forward solve on the transpose); kernels live in backends/.
#include <string>

#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/capture_rules.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/core/transfer.h"
#include "tenax/named/align.h"

namespace tenax::detail {
namespace {

struct Square {
  Name row, col;
  int64_t n;
  Axes batch;  // every axis but row and col, in the tensor's order
};

Square square_axes(const Tensor& a, const Attrs& attrs, const char* op) {
  if (attrs.axes.size() != 2) throw AxisError(std::string("[") + op + "] name the (row, col) axes");
  Square s{attrs.axes[0], attrs.axes[1], 0, a.axes()};
  const int64_t nr = a.axes().size_of(s.row, op), nc = a.axes().size_of(s.col, op);
  if (nr != nc)
    throw ShapeError(std::string("[") + op + "] the matrix axes must have one size: '" + s.row.str() + "'=" +
                     std::to_string(nr) + ", '" + s.col.str() + "'=" + std::to_string(nc) + " in " +
                     a.axes().describe());
  s.n = nr;
  s.batch.erase(s.batch.index_of(s.row));
  s.batch.erase(s.batch.index_of(s.col));
  return s;
}

MatView mat(const Tensor& t, Name row, Name col) {
  return {t.data_ptr(), t.axes().size_of(row), t.stride(row), t.stride(col)};
}

// A (row, col) matrix of `inside` on the triangle (lower or upper, with diagonal), 0 elsewhere, on
// `device` (the device of the tensor it multiplies).
Tensor triangle_mask(Name row, Name col, int64_t n, bool lower, double inside, double diag, DType dt,
                     Device device = Device::cpu()) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      v[static_cast<size_t>(i * n + j)] = i == j ? diag : ((lower ? i > j : i < j) ? inside : 0.0);
  Tensor m = tensor(v, Axes{{row, n}, {col, n}});
  return to(dt == DType::f64 ? m : astype(m, dt), device);
}

// ---- cholesky: attrs.axes = {row, col} ----
// The linear-algebra VJP rules loop over the batch axes of their primal values, so they are
// registered with batched_vjp = false (a batched cotangent raises AutodiffError).
Tensor cholesky_forward(Inputs in, const Attrs& attrs) {
  check_numeric_operands("cholesky", in);
  const Tensor& a = in[0];
  Square sq = square_axes(a, attrs, "cholesky");
  Tensor out = empty(a.axes(), a.dtype(), a.device());
  std::vector<int64_t> oa, ol;
  batch_offsets(a, sq.batch, oa);
  batch_offsets(out, sq.batch, ol);
  MatBatch mb{static_cast<int64_t>(oa.size()), oa.data(), ol.data(), nullptr};
  int64_t bad = need(kernels(a.device()).cholesky[numeric_index(a.dtype(), "cholesky")], "cholesky", a.device())(
      mat(a, sq.row, sq.col), mat(out, sq.row, sq.col), mb);
  if (bad >= 0)
    throw NumericError("[cholesky] the matrix over ('" + sq.row.str() + "', '" + sq.col.str() + "') at batch index " +
                       batch_index(sq.batch, bad) + " is not positive definite (or holds a NaN or infinity)");
  return out;
}

// ---- complex (Hermitian) Cholesky's rules, written with ops over the (row, col) axes ----
struct MatrixOps {
  Name r, k;
  const Name c = "__tenax_c", m = "__tenax_m";
  // A B
  [[nodiscard]] Tensor matmul(const Tensor& a, const Tensor& b) const {
    return dot(rename(a, k, m), rename(b, r, m), AxisList{m});
  }
  // A^H
  [[nodiscard]] Tensor herm(const Tensor& a) const { return conj(rename(a, AxisList{r, k}, AxisList{k, r})); }
  // L^{-1} B
  [[nodiscard]] Tensor solve_lower(const Tensor& l, const Tensor& b) const {
    return rename(triangular_solve(l, rename(b, k, c), r, k), AxisList{k, c}, AxisList{r, k});
  }
  // L^{-H} B = conj(L^{-T} conj(B))
  [[nodiscard]] Tensor solve_lower_h(const Tensor& l, const Tensor& b) const {
    const Tensor z = triangular_solve(l, rename(conj(b), AxisList{r, k}, AxisList{k, c}), r, k, Triangle::lower,
                                      Transpose::yes);
    return conj(rename(z, c, k));
  }
};

// Ā = (G + G^H) on the lower triangle with the diagonal halved (its real part), G = L^{-H} Φ(L^H L̄) L^{-1}
// (Φ: the lower triangle, diagonal halved): the adjoint of the JVP below for A read through its lower
// triangle as a Hermitian matrix.
void complex_cholesky_vjp(VjpContext& c, const Square& sq) {
  const MatrixOps o{sq.row, sq.col};
  const Tensor& l = c.output();
  const Tensor half = triangle_mask(sq.row, sq.col, sq.n, true, 1.0, 0.5, l.dtype(), l.device());
  const Tensor p = o.matmul(o.herm(l), c.cotangent()) * half;
  const Tensor g = o.solve_lower_h(l, o.herm(o.solve_lower_h(l, o.herm(p))));
  add_to_adjoint(c, 0, (g + o.herm(g)) * half);
}

// tL = L Φ(L^{-1} tS L^{-H}), tS = D + D^H with D tA's lower triangle, diagonal halved (so tS is
// Hermitian with tA's strict lower triangle and the real part of its diagonal).
Tensor complex_cholesky_jvp(JvpContext& c, const Square& sq) {
  const MatrixOps o{sq.row, sq.col};
  const Tensor& l = c.output();
  const Tensor half = triangle_mask(sq.row, sq.col, sq.n, true, 1.0, 0.5, l.dtype(), l.device());
  const Tensor d = c.tangent(0) * half;
  const Tensor m = o.solve_lower(l, o.herm(o.solve_lower(l, d + o.herm(d))));
  return o.matmul(l, m * half);
}

void cholesky_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  if (is_complex(c.output().dtype())) return complex_cholesky_vjp(c, square_axes(c.output(), c.attrs(), "cholesky vjp"));
  const Tensor& l = c.output();
  const Tensor& g = c.cotangent();
  const Tensor& dst = c.adjoint(0);
  Square sq = square_axes(l, c.attrs(), "cholesky vjp");
  std::vector<int64_t> ol, og, od;
  batch_offsets(l, sq.batch, ol);
  batch_offsets(g, sq.batch, og);
  batch_offsets(dst, sq.batch, od);
  MatBatch mb{static_cast<int64_t>(ol.size()), ol.data(), og.data(), od.data()};
  kernels(l.device()).cholesky_vjp[float_index(l.dtype(), "cholesky")](
      mat(l, sq.row, sq.col), mat(g, sq.row, sq.col), mat(dst, sq.row, sq.col), mb);
}

// tL = L Φ(L^{-1} tS L^{-T}), tS the symmetric matrix read from tA's lower triangle.
Tensor cholesky_jvp(JvpContext& c) {
  const Tensor& l = c.output();
  const Tensor& ta = c.tangent(0);
  Square sq = square_axes(l, c.attrs(), "cholesky jvp");
  if (is_complex(l.dtype())) return complex_cholesky_jvp(c, sq);
  const Name r = sq.row, k = sq.col, tj = "__tenax_j", tk = "__tenax_k";
  const DType dt = l.dtype();
  Tensor low = ta * triangle_mask(r, k, sq.n, true, 1.0, 1.0, dt, l.device());
  Tensor strict = ta * triangle_mask(r, k, sq.n, true, 1.0, 0.0, dt, l.device());
  Tensor ts = low + rename(strict, AxisList{r, k}, AxisList{k, r});
  Tensor x = triangular_solve(l, rename(ts, k, tk), r, k);             // X = L^{-1} tS: (col, tk)
  Tensor z = triangular_solve(l, rename(x, AxisList{tk, k}, AxisList{r, tj}), r, k);  // (tj, col)
  Tensor m = rename(z, tj, r);                                          // M over (row, col)
  Tensor phi = m * triangle_mask(r, k, sq.n, true, 1.0, 0.5, dt, l.device());
  Tensor tl = dot(l, rename(phi, AxisList{r, k}, AxisList{k, tj}), AxisList{k});
  return rename(tl, tj, k);
}

// ---- triangular_solve and solve: attrs.axes = {row, col}, i[0] = lower, i[1] = transpose ----
struct SolveAxes {
  Square sq;
  Name in_axis, out_axis;  // b's axis and z's axis
  Axes z_axes;
};

SolveAxes solve_axes(const Tensor& t, const Tensor& b, const Attrs& attrs, const char* op) {
  const Tensor* operands[2] = {&t, &b};
  check_numeric_operands(op, Inputs{operands, 2});
  SolveAxes s{square_axes(t, attrs, op), {}, {}, {}};
  const bool tr = attrs.i[1] != 0;
  s.in_axis = tr ? s.sq.col : s.sq.row;
  s.out_axis = tr ? s.sq.row : s.sq.col;
  if (!b.has_axis(s.in_axis))
    throw AxisError(std::string("[") + op + "] the right-hand side " + b.axes().describe() + " needs axis '" +
                    s.in_axis.str() + "' (the matrix's " + (tr ? "column" : "row") + " axis)");
  if (b.has_axis(s.out_axis))
    throw AxisError(std::string("[") + op + "] the right-hand side " + b.axes().describe() + " already has axis '" +
                    s.out_axis.str() + "', which the solution takes; rename it first");
  if (b.size(s.in_axis) != s.sq.n)
    throw ShapeError(std::string("[") + op + "] the right-hand side's axis '" + s.in_axis.str() + "' has size " +
                     std::to_string(b.size(s.in_axis)) + " but the matrix is " + std::to_string(s.sq.n) + " x " +
                     std::to_string(s.sq.n));
  Axes zb = b.axes();
  zb.set_name(zb.index_of(s.in_axis), s.out_axis);
  s.z_axes = align_axes(zb, s.sq.batch, op, 1, 0);
  return s;
}

// z = b broadcast to z's axes (with in_axis renamed), ready to solve in place.
Tensor rhs_copy(const Tensor& b, const SolveAxes& s) {
  Tensor z = empty(s.z_axes, b.dtype(), b.device());
  Tensor bv = rename(b, s.in_axis, s.out_axis);
  LoopArg args[2] = {loop_arg(z, s.z_axes), loop_arg(bv, s.z_axes)};
  kernels(z.device()).copy[copy_index(z.dtype())](loop_dims(s.z_axes), args);
  return z;
}

template <bool Triangular>
Tensor solve_forward(Inputs in, const Attrs& attrs) {
  const char* op = Triangular ? "triangular_solve" : "solve";
  const Tensor& t = in[0];
  SolveAxes s = solve_axes(t, in[1], attrs, op);
  Tensor z = rhs_copy(in[1], s);
  const bool tr = attrs.i[1] != 0;
  MatView a = mat(t, s.sq.row, s.sq.col);
  if (tr) std::swap(a.rs, a.cs);
  Axes batch = s.z_axes;
  batch.erase(batch.index_of(s.out_axis));
  RhsView r{z.data_ptr(), s.sq.n, 1, z.stride(s.out_axis), 0};
  // On the host, an axis of b that the matrix lacks becomes the kernel's right-hand-side columns
  // (the largest such axis): the matrix is then checked, inverted along its diagonal or factorised
  // once for all of them, not once per column (a Kalman step's L⁻¹ (H P) solved 4 columns as 4
  // batch entries, each with its own checks and divisions). On a device every column stays a batch
  // entry: there each batch entry is a thread of its own.
  if (t.device().kind == Device::Kind::cpu) {
    int fold = -1;
    for (int i = 0; i < batch.rank(); ++i)
      if (!t.has_axis(batch.name(i)) && batch.size(i) > 1 && (fold < 0 || batch.size(i) > batch.size(fold)))
        fold = i;
    if (fold >= 0) {
      r.nrhs = batch.size(fold);
      r.cs = z.stride(batch.name(fold));
      batch.erase(fold);
    }
  }
  std::vector<int64_t> ot, oz;
  batch_offsets(t, batch, ot);
  batch_offsets(z, batch, oz);
  MatBatch mb{static_cast<int64_t>(oz.size()), ot.data(), oz.data(), nullptr};
  const KernelTable& k = kernels(t.device());
  const int fi = numeric_index(t.dtype(), op);
  int64_t bad = Triangular ? need(k.tri_solve[fi], op, t.device())(a, r, (attrs.i[0] != 0) != tr, mb)
                           : need(k.solve[fi], op, t.device())(a, r, mb);
  if (bad >= 0)
    throw NumericError(std::string("[") + op + "] the matrix over ('" + s.sq.row.str() + "', '" + s.sq.col.str() +
                       "') at batch index " + batch_index(batch, bad) + " is singular (a zero or non-finite pivot)");
  return z;
}

Tensor solve_again(bool triangular, const Tensor& t, const Tensor& b, const Attrs& a, bool flip) {
  const Transpose tr = (a.i[1] != 0) != flip ? Transpose::yes : Transpose::no;
  return triangular ? triangular_solve(t, b, a.axes[0], a.axes[1], a.i[0] != 0 ? Triangle::lower : Triangle::upper, tr)
                    : solve(t, b, a.axes[0], a.axes[1], tr);
}

// Shared axes of b̄ and z that the matrix lacks are summed when forming the matrix adjoint.
AxisList summed_for_matrix(const Tensor& bbar, const Tensor& z, const Axes& mat_axes) {
  AxisList over;
  for (int i = 0; i < bbar.rank(); ++i) {
    Name n = bbar.axes().name(i);
    if (z.has_axis(n) && !mat_axes.contains(n)) over.push_back(n);
  }
  return over;
}

template <bool Triangular>
void solve_vjp(VjpContext& c) {
  const Attrs& a = c.attrs();
  const Tensor& t = c.input(0);
  const Tensor& z = c.output();
  // Complex: b̄ = T^{-H} z̄ = conj(T^{-T} conj(z̄)) and Ā = -(b̄ ⊗ conj(z)) (docs/complex.md).
  const bool cx = is_complex(t.dtype());
  Tensor bbar = cx ? conj(solve_again(Triangular, t, conj(c.cotangent()), a, true))
                   : solve_again(Triangular, t, c.cotangent(), a, true);
  if (c.needs_grad(1)) add_to_adjoint(c, 1, bbar);  // a fresh adjoint is a copy, not zeros + bbar
  if (c.needs_grad(0)) {
    // Ā (+)= -(b̄ ⊗ z), on the triangle for a triangular matrix: one pass of the mul rule's reverse
    // kernel (dst (+)= g · mask) or of sub's (dst (+)= -g), not a product, then zeros, then a sum.
    const Tensor zc = cx ? conj(z) : z;
    Tensor outer = dot(bbar, zc, summed_for_matrix(bbar, zc, t.axes()));
    const Axes& ax = outer.axes();
    bool assign = false;
    const Tensor& dst = adjoint_for_pass(c, 0, outer.numel(), assign);
    const KernelTable& k = kernels(outer.device());
    const auto& rule = assign ? k.deriv_set : k.deriv_acc;
    const int fi = numeric_index(outer.dtype(), Triangular ? "triangular_solve vjp" : "solve vjp");
    if constexpr (Triangular) {
      Tensor mask = triangle_mask(a.axes[0], a.axes[1], t.size(a.axes[0]), a.i[0] != 0, -1.0, -1.0, t.dtype(),
                                  t.device());
      LoopArg args[5] = {loop_arg(dst, ax), loop_arg(outer, ax), no_arg(), loop_arg(mask, ax), no_arg()};
      rule[static_cast<int>(DerivOp::mul_a)][fi](loop_dims(ax), args);
    } else {
      LoopArg args[5] = {loop_arg(dst, ax), loop_arg(outer, ax), no_arg(), no_arg(), no_arg()};
      rule[static_cast<int>(DerivOp::sub_b)][fi](loop_dims(ax), args);
    }
  }
}

template <bool Triangular>
Tensor solve_jvp(JvpContext& c) {
  const Attrs& a = c.attrs();
  const Tensor& t = c.input(0);
  const Tensor& z = c.output();
  const Name out_axis = a.i[1] != 0 ? a.axes[0] : a.axes[1];
  Tensor rhs = c.tangent(1);
  if (c.tangent(0).defined()) {
    Tensor tt = c.tangent(0);
    if (Triangular)
      tt = tt * triangle_mask(a.axes[0], a.axes[1], t.size(a.axes[0]), a.i[0] != 0, 1.0, 1.0, t.dtype(),
                              t.device());
    Tensor prod = dot(tt, z, AxisList{out_axis});
    rhs = rhs.defined() ? rhs - prod : -prod;
  }
  return solve_again(Triangular, t, rhs, a, false);
}

// ---- logdet: attrs.axes = {row, col} ----
Tensor run_logdet(const Tensor& a, const Attrs& attrs, Tensor* inv_t) {
  const Tensor* operand = &a;
  check_float_operands("logdet", Inputs{&operand, 1});
  Square sq = square_axes(a, attrs, "logdet");
  Tensor out = empty(sq.batch, a.dtype(), a.device());
  std::vector<int64_t> oa, oo, oi;
  batch_offsets(a, sq.batch, oa);
  batch_offsets(out, sq.batch, oo);
  MatView iv{};
  if (inv_t) {
    *inv_t = empty(a.axes(), a.dtype(), a.device());
    batch_offsets(*inv_t, sq.batch, oi);
    iv = mat(*inv_t, sq.row, sq.col);
  }
  MatBatch mb{static_cast<int64_t>(oa.size()), oa.data(), oo.data(), inv_t ? oi.data() : nullptr};
  int64_t bad = need(kernels(a.device()).logdet[float_index(a.dtype(), "logdet")], "logdet", a.device())(
      mat(a, sq.row, sq.col), out.data_ptr(), iv, inv_t != nullptr, mb);
  if (bad >= 0)
    throw NumericError("[logdet] the matrix over ('" + sq.row.str() + "', '" + sq.col.str() + "') at batch index " +
                       batch_index(sq.batch, bad) + " is singular (a zero or non-finite pivot)");
  return out;
}

Tensor logdet_forward(Inputs in, const Attrs& attrs) { return run_logdet(in[0], attrs, nullptr); }

void logdet_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  Tensor inv_t;
  (void)run_logdet(c.input(0), c.attrs(), &inv_t);
  const Tensor& dst = c.adjoint(0);
  accumulate(dst, inv_t * c.cotangent());
}

Tensor logdet_jvp(JvpContext& c) {
  Tensor inv_t;
  (void)run_logdet(c.input(0), c.attrs(), &inv_t);
  return sum(inv_t * c.tangent(0), c.attrs().axes);
}

// ---- samplers: matrices over (m, n) of size 3, batch axes from the pool ----
constexpr int64_t kN = 3;

Attrs mat_attrs(SampleRng& rng, bool with_flags) {
  Attrs a;
  a.axes = AxisList{"m", "n"};
  if (with_flags) {
    a.i[0] = int64_t(rng() & 1);
    a.i[1] = int64_t((rng() >> 1) & 1);
  }
  return a;
}

Tensor well_conditioned(SampleRng& rng, const Axes& batch, DType dt) {
  Axes ax = batch;
  ax.push_back({"m", kN});
  ax.push_back({"n", kN});
  return random_values(rng, ax, dt, -1, 1) + triangle_mask("m", "n", kN, true, 0.0, 3.0, dt);
}

OpSample cholesky_sample(SampleRng& rng, DType dt) {
  return {{random_spd(rng, "m", "n", kN, random_subset(rng, random_axes(rng, 2)), dt)}, mat_attrs(rng, false)};
}

OpSample solve_sample_impl(SampleRng& rng, DType dt, bool flags) {
  Attrs a = mat_attrs(rng, flags);
  Axes shared = random_axes(rng, 2);
  Tensor t = well_conditioned(rng, random_subset(rng, shared), dt);
  Axes b_axes = random_subset(rng, shared);
  b_axes.push_back({a.i[1] ? "n" : "m", kN});
  return {{t, random_values(rng, b_axes, dt, -1, 1)}, a};
}

OpSample tri_sample(SampleRng& rng, DType dt) { return solve_sample_impl(rng, dt, true); }
OpSample solve_sample(SampleRng& rng, DType dt) { return solve_sample_impl(rng, dt, false); }
OpSample logdet_sample(SampleRng& rng, DType dt) {
  return {{well_conditioned(rng, random_subset(rng, random_axes(rng, 2)), dt)}, mat_attrs(rng, false)};
}

constexpr AttrSpec kMatrixAttrs[] = {{"row", AttrKind::name, "the matrices' row axis"},
                                     {"col", AttrKind::name, "their column axis"}};
const OpDef op_cholesky = {
    .name = "cholesky",
    .arity = 1,
    .forward = cholesky_forward,
    .vjp = cholesky_vjp,
    .jvp = cholesky_jvp,
    .saves = kSaveOutput,
    .sample = cholesky_sample,
    .batched_vjp = false,
    .complex = true,
    .attrs = kMatrixAttrs,
    .doc = "lower Cholesky factor of the SPD (complex: Hermitian PD, A = L L^H) matrices over (row, col); reads the lower triangle"};
constexpr AttrSpec kTriSolveAttrs[] = {
    {"row", AttrKind::name, "the matrices' row axis"},
    {"col", AttrKind::name, "their column axis"},
    {"lower", AttrKind::boolean, "lower (true) or upper (false) triangular", 0, false, 1},
    {"transpose", AttrKind::boolean, "solve with the transpose", 1, false, 0}};
const OpDef op_triangular_solve = {.name = "triangular_solve",
                                   .arity = 2,
                                   .forward = solve_forward<true>,
                                   .vjp = solve_vjp<true>,
                                   .jvp = solve_jvp<true>,
                                   .saves = 1u | kSaveOutput,
                                   .sample = tri_sample,
                                   .batched_vjp = false,
                                   .complex = true,
                                   .attrs = kTriSolveAttrs,
                                   .doc = "solves T z = b (or T^T z = b) for triangular T over (row, col)"};
constexpr AttrSpec kSolveAttrs[] = {
    {"row", AttrKind::name, "the matrices' row axis"},
    {"col", AttrKind::name, "their column axis"},
    {"transpose", AttrKind::boolean, "solve with the transpose", 1, false, 0}};
const OpDef op_solve = {.name = "solve",
                        .arity = 2,
                        .forward = solve_forward<false>,
                        .vjp = solve_vjp<false>,
                        .jvp = solve_jvp<false>,
                        .saves = 1u | kSaveOutput,
                        .sample = solve_sample,
                        .batched_vjp = false,
                        .complex = true,
                        .attrs = kSolveAttrs,
                        .doc = "solves A z = b (or A^T z = b) by LU with partial pivoting over (row, col)"};
const OpDef op_logdet = {.name = "logdet",
                         .arity = 1,
                         .forward = logdet_forward,
                         .vjp = logdet_vjp,
                         .jvp = logdet_jvp,
                         .saves = 1u,
                         .sample = logdet_sample,
                         .batched_vjp = false,
                         .attrs = kMatrixAttrs,
                         .doc = "log |det A| of the SPD matrices over (row, col), through Cholesky"};

Attrs solve_attrs(Name row, Name col, bool lower, bool transpose, const Axes& of, const char* op) {
  Attrs a;
  a.axes = matrix_axes(row, col, of, op);
  a.i[0] = lower;
  a.i[1] = transpose;
  return a;
}

}  // namespace

// ---- capture rules: this family's kernels in a scan step's captured program (capture_rules.h) ----
namespace {

template <int Dev, int Dt>
int64_t cholesky_trampoline(MatView a, MatView l, const MatBatch& b) {
  MatPlan p;
  p.a = a;
  p.b = l;
  int64_t r = -1;
  if (record_matrix_plan<Dev, Dt>(MatKind::cholesky, p, b, "cholesky", {a.data, l.data}, r)) return r;
  const CholeskyFn fn = real_kernels(Dev).cholesky[Dt];
  return record_matrix_call<Dev>(b, l.data, "cholesky", [fn, a, l](const MatBatch& m) { return fn(a, l, m); },
                                 {a.data, l.data});
}
template <int Dev, int Dt>
void cholesky_vjp_trampoline(MatView l, MatView lbar, MatView abar, const MatBatch& b) {
  MatPlan p;
  p.a = l;
  p.b = lbar;
  p.c = abar;
  int64_t r = -1;
  if (record_matrix_plan<Dev, Dt>(MatKind::cholesky_vjp, p, b, "cholesky vjp", {l.data, lbar.data, abar.data},
                                  r))
    return;
  const CholeskyVjpFn fn = real_kernels(Dev).cholesky_vjp[Dt];
  (void)record_matrix_call<Dev>(b, abar.data, "cholesky vjp",
                                [fn, l, lbar, abar](const MatBatch& m) {
                                  fn(l, lbar, abar, m);
                                  return int64_t{-1};
                                },
                                {l.data, lbar.data, abar.data});
}
template <int Dev, int Dt>
int64_t tri_solve_trampoline(MatView t, RhsView r, bool lower, const MatBatch& b) {
  MatPlan p;
  p.a = t;
  p.r = r;
  p.lower = lower;
  int64_t result = -1;
  if (record_matrix_plan<Dev, Dt>(MatKind::tri_solve, p, b, "triangular_solve", {t.data, r.data}, result))
    return result;
  const TriSolveFn fn = real_kernels(Dev).tri_solve[Dt];
  return record_matrix_call<Dev>(b, r.data, "triangular_solve",
                                 [fn, t, r, lower](const MatBatch& m) { return fn(t, r, lower, m); },
                                 {t.data, r.data});
}
template <int Dev, int Dt>
int64_t solve_trampoline(MatView a, RhsView r, const MatBatch& b) {
  const SolveFn fn = real_kernels(Dev).solve[Dt];
  return record_matrix_call<Dev>(b, r.data, "solve", [fn, a, r](const MatBatch& m) { return fn(a, r, m); },
                                 {a.data, r.data});
}
template <int Dev, int Dt>
int64_t logdet_trampoline(MatView a, void* out, MatView inv_t, bool want, const MatBatch& b) {
  const LogdetFn fn = real_kernels(Dev).logdet[Dt];
  return record_matrix_call<Dev>(
      b, out, "logdet", [fn, a, out, inv_t, want](const MatBatch& m) { return fn(a, out, inv_t, want, m); },
      {a.data, out, want ? inv_t.data : nullptr});
}

template <int Dev>
void install_capture(KernelTable& t) {
  swap_in(t.cholesky[0], &cholesky_trampoline<Dev, 0>);
  swap_in(t.cholesky[1], &cholesky_trampoline<Dev, 1>);
  swap_in(t.cholesky_vjp[0], &cholesky_vjp_trampoline<Dev, 0>);
  swap_in(t.cholesky_vjp[1], &cholesky_vjp_trampoline<Dev, 1>);
  swap_in(t.tri_solve[0], &tri_solve_trampoline<Dev, 0>);
  swap_in(t.tri_solve[1], &tri_solve_trampoline<Dev, 1>);
  swap_in(t.solve[0], &solve_trampoline<Dev, 0>);
  swap_in(t.solve[1], &solve_trampoline<Dev, 1>);
  swap_in(t.logdet[0], &logdet_trampoline<Dev, 0>);
  swap_in(t.logdet[1], &logdet_trampoline<Dev, 1>);
  swap_in(t.cholesky[2], &cholesky_trampoline<Dev, 2>);
  swap_in(t.cholesky[3], &cholesky_trampoline<Dev, 3>);
  swap_in(t.tri_solve[2], &tri_solve_trampoline<Dev, 2>);
  swap_in(t.tri_solve[3], &tri_solve_trampoline<Dev, 3>);
  swap_in(t.solve[2], &solve_trampoline<Dev, 2>);
  swap_in(t.solve[3], &solve_trampoline<Dev, 3>);
}

}  // namespace

void install_linalg_capture(KernelTable& capturing, int device_kind) {
  if (device_kind == 0)
    install_capture<0>(capturing);
  else
    install_capture<1>(capturing);
}

void register_linalg_ops(std::vector<const OpDef*>& ops) {
  for (const OpDef* op : {&op_cholesky, &op_triangular_solve, &op_solve, &op_logdet}) ops.push_back(op);
}

}  // namespace tenax::detail

namespace tenax {

Tensor cholesky(const Tensor& a, Name row, Name col) {
  Attrs at;
  at.axes = detail::matrix_axes(row, col, a.axes(), "cholesky");
  return detail::apply(detail::op_cholesky, a, at);
}
Tensor triangular_solve(const Tensor& t, const Tensor& b, Name row, Name col, Triangle triangle,
                        Transpose transpose) {
  return detail::apply(detail::op_triangular_solve, t, b,
                       detail::solve_attrs(row, col, triangle == Triangle::lower, transpose == Transpose::yes,
                                           t.axes(), "triangular_solve"));
}
Tensor solve(const Tensor& a, const Tensor& b, Name row, Name col, Transpose transpose) {
  return detail::apply(detail::op_solve, a, b,
                       detail::solve_attrs(row, col, true, transpose == Transpose::yes, a.axes(), "solve"));
}
Tensor logdet(const Tensor& a, Name row, Name col) {
  Attrs at;
  at.axes = detail::matrix_axes(row, col, a.axes(), "logdet");
  return detail::apply(detail::op_logdet, a, at);
}

}  // namespace tenax
