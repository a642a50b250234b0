// Layout ops. rename, transpose, slice, select, diagonal and broadcast are views: they never copy, and their
// adjoint is the same view of the parent's adjoint (the tape applies forward() to it), so slicing a
// tensor k times accumulates into ONE adjoint buffer. contiguous is the one copying layout op.
#include <algorithm>

#include "tenax/core/ops.h"
#include "tenax/core/ops/dispatch.h"
#include "tenax/core/ops/families.h"
#include "tenax/core/ops/sampling.h"
#include "tenax/named/batching.h"

namespace tenax::detail {
namespace {

using TA = TensorAccess;

int axis_index(const Tensor& x, Name n, const char* op) {
  int i = x.axes().index_of(n);
  if (i < 0)
    throw AxisError(std::string("[") + op + "] unknown axis '" + n.str() + "'; the tensor has axes " +
                    x.axes().describe());
  return i;
}

// A view's own adjoint is an alias of its parent's: nothing to do in the reverse sweep.
void view_vjp(VjpContext&) {}

// ---- rename: attrs.axes = from, attrs.axes2 = to ----
Tensor rename_forward(Inputs in, const Attrs& a) {
  if (a.axes.size() != a.axes2.size())
    throw AxisError("[rename] " + a.axes.describe() + " and " + a.axes2.describe() + " differ in length");
  Tensor out = in[0];
  TA::set_var(out, -1, 0);
  Axes& ax = TA::axes(out);
  for (int k = 0; k < a.axes.size(); ++k) ax.set_name(axis_index(in[0], a.axes[k], "rename"), a.axes2[k]);
  for (int i = 0; i < ax.rank(); ++i)
    for (int j = i + 1; j < ax.rank(); ++j)
      if (ax.name(i) == ax.name(j))
        throw AxisError("[rename] renaming " + a.axes.describe() + " to " + a.axes2.describe() + " in " +
                        in[0].axes().describe() + " would name axis '" + ax.name(i).str() + "' twice");
  return out;
}
Tensor rename_jvp(JvpContext& c) { return rename(c.tangent(0), c.attrs().axes, c.attrs().axes2); }
OpSample rename_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  OpSample s{{random_values(rng, ax, dt, -1, 1)}, {}};
  s.attrs.axes = AxisList{ax.name(int(rng() % ax.rank()))};
  s.attrs.axes2 = AxisList{"z"};
  return s;
}

// ---- transpose: attrs.axes = the new order ----
Tensor transpose_forward(Inputs in, const Attrs& a) {
  const Tensor& x = in[0];
  for (Name n : a.axes) (void)axis_index(x, n, "transpose");
  // Batching rule: mapped axes the order leaves out follow it.
  const AxisList order = complete_order(x.axes(), a.axes, g_mapped, "transpose");
  Axes ax;
  int64_t st[kMaxRank];
  for (int k = 0; k < order.size(); ++k) {
    int i = axis_index(x, order[k], "transpose");
    ax.push_back(x.axes()[i]);
    st[k] = x.strides()[i];
  }
  return Tensor(x.storage(), x.offset(), ax, st, x.dtype());
}
Tensor transpose_jvp(JvpContext& c) {
  // A batched tangent's batch axes follow the order (as mapped axes do in the forward).
  const Tensor& t = c.tangent(0);
  return transpose(t, complete_order(t.axes(), c.attrs().axes, batch_axes_of(t, c.input(0).axes()).names(),
                                     "transpose jvp"));
}
OpSample transpose_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  OpSample s{{random_values(rng, ax, dt, -1, 1)}, {}};
  AxisList order = ax.names();
  std::vector<Name> v(order.begin(), order.end());
  std::shuffle(v.begin(), v.end(), rng);
  for (Name n : v) s.attrs.axes.push_back(n);
  return s;
}

// ---- slice: attrs.axes = {axis}, i = {start, stop, step} ----
Tensor slice_forward(Inputs in, const Attrs& a) {
  const Tensor& x = in[0];
  if (a.axes.size() != 1) throw AxisError("[slice] name exactly one axis");
  int d = axis_index(x, a.axes[0], "slice");
  const int64_t n = x.axes().size(d), step = a.i[2];
  // Negative indices count from the end (-1 is the last element); kToEnd is the axis size.
  const int64_t start = a.i[0] < 0 ? a.i[0] + n : a.i[0];
  const int64_t stop = a.i[1] == kToEnd ? n : a.i[1] < 0 ? a.i[1] + n : a.i[1];
  if (step < 1 || start < 0 || stop < start || stop > n)
    throw IndexError("[slice] range [" + std::to_string(a.i[0]) + ", " +
                     (a.i[1] == kToEnd ? std::string("end") : std::to_string(a.i[1])) + ") step " +
                     std::to_string(step) + " is invalid for axis '" + a.axes[0].str() + "' of size " +
                     std::to_string(n) + " in " + x.axes().describe() +
                     " (need 0 <= start <= stop <= size after counting negative indices from the end, step >= 1)");
  Tensor out = x;
  TA::set_var(out, -1, 0);
  TA::offset(out) += start * x.strides()[d];
  // Written so that no step (up to INT64_MAX) overflows: one element keeps its stride.
  const int64_t len = stop == start ? 0 : 1 + (stop - start - 1) / step;
  TA::axes(out).set_size(d, len);
  if (len > 1) TA::strides(out)[d] *= step;
  return out;
}
Tensor slice_jvp(JvpContext& c) {
  const Attrs& a = c.attrs();
  return slice(c.tangent(0), a.axes[0], a.i[0], a.i[1], a.i[2]);
}
OpSample slice_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  OpSample s{{random_values(rng, ax, dt, -1, 1)}, {}};
  int d = int(rng() % ax.rank());
  const int64_t n = ax.size(d);
  s.attrs.axes = AxisList{ax.name(d)};
  s.attrs.i[0] = int64_t(rng() % uint64_t(n));
  s.attrs.i[1] = s.attrs.i[0] + 1 + int64_t(rng() % uint64_t(n - s.attrs.i[0]));
  s.attrs.i[2] = 1 + int64_t(rng() % 2);
  // The same range written from the end, now and then: a negative start, stop or kToEnd.
  if (rng() % 3 == 0) s.attrs.i[0] -= n;
  if (rng() % 3 == 0) s.attrs.i[1] = s.attrs.i[1] == n ? kToEnd : s.attrs.i[1] - n;
  return s;
}

// ---- select: attrs.axes = {axis}, i[0] = index ----
Tensor select_forward(Inputs in, const Attrs& a) {
  const Tensor& x = in[0];
  if (a.axes.size() != 1) throw AxisError("[select] name exactly one axis");
  int d = axis_index(x, a.axes[0], "select");
  const int64_t n = x.axes().size(d), i = a.i[0];
  if (i < 0 || i >= n)
    throw IndexError("[select] index " + std::to_string(i) + " is out of range for axis '" + a.axes[0].str() +
                     "' of size " + std::to_string(n) + " in " + x.axes().describe());
  return select_view(x, d, i);
}
Tensor select_jvp(JvpContext& c) { return select(c.tangent(0), c.attrs().axes[0], c.attrs().i[0]); }
OpSample select_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 3));
  OpSample s{{random_values(rng, ax, dt, -1, 1)}, {}};
  int d = int(rng() % ax.rank());
  s.attrs.axes = AxisList{ax.name(d)};
  s.attrs.i[0] = int64_t(rng() % uint64_t(ax.size(d)));
  return s;
}

// ---- diagonal: attrs.axes = {row, col} ----
// The elements (i, i) of the matrices over (row, col), along `row`; col disappears. A view whose
// row stride is the sum of the two: its adjoint is the diagonal of the parent's adjoint.
Tensor diagonal_forward(Inputs in, const Attrs& a) {
  const Tensor& x = in[0];
  if (a.axes.size() != 2) throw AxisError("[diagonal] name two different axes, row and col");
  const int r = axis_index(x, a.axes[0], "diagonal"), c = axis_index(x, a.axes[1], "diagonal");
  if (x.axes().size(r) != x.axes().size(c))
    throw ShapeError("[diagonal] axes '" + a.axes[0].str() + "' and '" + a.axes[1].str() + "' of " +
                     x.axes().describe() + " differ in size; the diagonal needs a square matrix");
  Axes ax = x.axes();
  ax.erase(c);
  int64_t st[kMaxRank];
  for (int k = 0, j = 0; k < x.rank(); ++k)
    if (k != c) st[j++] = k == r ? x.strides()[r] + x.strides()[c] : x.strides()[k];
  return Tensor(x.storage(), x.offset(), ax, st, x.dtype());
}
Tensor diagonal_jvp(JvpContext& c) { return diagonal(c.tangent(0), c.attrs().axes[0], c.attrs().axes[1]); }
OpSample diagonal_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 2));
  const int64_t n = 1 + int64_t(rng() % 3);
  const int at = int(rng() % (ax.rank() + 1));
  Axes with;
  for (int k = 0; k <= ax.rank(); ++k) {
    if (k == at) {
      with.push_back({"m", n});
      with.push_back({"n", n});
    }
    if (k < ax.rank()) with.push_back(ax[k]);
  }
  OpSample s{{random_values(rng, with, dt, -1, 1)}, {}};
  s.attrs.axes = rng() % 2 ? AxisList{"m", "n"} : AxisList{"n", "m"};
  return s;
}

// ---- broadcast: attrs.shape = the new axes ----
Tensor broadcast_forward(Inputs in, const Attrs& a) {
  const Tensor& x = in[0];
  Axes ax = x.axes();
  int64_t st[kMaxRank];
  std::copy(x.strides(), x.strides() + x.rank(), st);
  for (int k = 0; k < a.shape.rank(); ++k) {
    if (ax.contains(a.shape.name(k)))
      throw AxisError("[broadcast] axis '" + a.shape.name(k).str() + "' is already in " + x.axes().describe());
    st[ax.rank()] = 0;
    ax.push_back(a.shape[k]);
  }
  return Tensor(x.storage(), x.offset(), ax, st, x.dtype());
}
Tensor broadcast_jvp(JvpContext& c) { return broadcast(c.tangent(0), c.attrs().shape); }
OpSample broadcast_sample(SampleRng& rng, DType dt) {
  Axes ax = random_axes(rng, 1 + int(rng() % 2));
  OpSample s{{random_values(rng, ax, dt, -1, 1)}, {}};
  s.attrs.shape.push_back({"z", 2});
  return s;
}

// ---- contiguous (copies) ----
Tensor contiguous_forward(Inputs in, const Attrs&) { return copy_of(in[0]); }
void contiguous_vjp(VjpContext& c) {
  if (!c.needs_grad(0)) return;
  const Tensor& dst = c.adjoint(0);
  accumulate(dst, c.cotangent());
}
Tensor contiguous_jvp(JvpContext& c) { return contiguous(c.tangent(0)); }
OpSample contiguous_sample(SampleRng& rng, DType dt) {
  return {{random_values(rng, random_axes(rng, 1 + int(rng() % 3)), dt, -1, 1)}, {}};
}

constexpr AttrSpec kRenameAttrs[] = {
    {"from", AttrKind::names, "the axes renamed"},
    {"to", AttrKind::names2, "their new names (simultaneous: a swap is allowed)", 0, true, 0, true}};
const OpDef op_rename = {.name = "rename",
                         .arity = 1,
                         .forward = rename_forward,
                         .vjp = view_vjp,
                         .jvp = rename_jvp,
                         .view = true,
                         .sample = rename_sample,
                         .complex = true,
                         .attrs = kRenameAttrs,
                         .doc = "renames axes `from` to `to` (view)"};
constexpr AttrSpec kTransposeAttrs[] = {{"order", AttrKind::names, "every axis, in the new order"}};
const OpDef op_transpose = {.name = "transpose",
                            .arity = 1,
                            .forward = transpose_forward,
                            .vjp = view_vjp,
                            .jvp = transpose_jvp,
                            .view = true,
                            .sample = transpose_sample,
                            .complex = true,
                            .shard = ShardRule::layout,
                            .attrs = kTransposeAttrs,
                            .doc = "reorders the axes to `order` (view)"};
constexpr AttrSpec kSliceAttrs[] = {{"axis", AttrKind::name, "the axis sliced"},
                                    {"start", AttrKind::integer, "first index; negative counts from the end (-1: the last)", 0},
                                    {"stop", AttrKind::integer, "one past the last; negative counts from the end; absent: the axis end", 1, false, kToEnd},
                                    {"step", AttrKind::integer, "stride (>= 1)", 2, false, 1}};
const OpDef op_slice = {.name = "slice",
                        .arity = 1,
                        .forward = slice_forward,
                        .vjp = view_vjp,
                        .jvp = slice_jvp,
                        .view = true,
                        .sample = slice_sample,
                        .complex = true,
                        .attrs = kSliceAttrs,
                        .doc = "elements start, start + step, ... < stop along `axis` (view)"};
constexpr AttrSpec kSelectAttrs[] = {{"axis", AttrKind::name, "the axis that disappears"},
                                     {"index", AttrKind::integer, "the element kept", 0}};
const OpDef op_select = {.name = "select",
                         .arity = 1,
                         .forward = select_forward,
                         .vjp = view_vjp,
                         .jvp = select_jvp,
                         .view = true,
                         .sample = select_sample,
                         .complex = true,
                         .attrs = kSelectAttrs,
                         .doc = "the slice at `index` along `axis`, which disappears (view)"};
constexpr AttrSpec kDiagonalAttrs[] = {{"row", AttrKind::name, "the matrices' row axis (kept)"},
                                       {"col", AttrKind::name, "their column axis (disappears)"}};
const OpDef op_diagonal = {
    .name = "diagonal",
    .arity = 1,
    .forward = diagonal_forward,
    .vjp = view_vjp,
    .jvp = diagonal_jvp,
    .view = true,
    .sample = diagonal_sample,
    .complex = true,
    .attrs = kDiagonalAttrs,
    .doc = "the diagonal (i, i) of the square matrices over (row, col), along `row` (view)"};
constexpr AttrSpec kBroadcastAttrs[] = {
    {"axes", AttrKind::shape, "declared axes added, at their declared sizes"}};
const OpDef op_broadcast = {.name = "broadcast",
                            .arity = 1,
                            .forward = broadcast_forward,
                            .vjp = view_vjp,
                            .jvp = broadcast_jvp,
                            .view = true,
                            .sample = broadcast_sample,
                            .complex = true,
                            .attrs = kBroadcastAttrs,
                            .doc = "adds axes with stride 0 after the input's (view, nothing copied)"};
const OpDef op_contiguous = {.name = "contiguous",
                             .arity = 1,
                             .forward = contiguous_forward,
                             .vjp = contiguous_vjp,
                             .jvp = contiguous_jvp,
                             .sample = contiguous_sample,
                             .complex = true,
                             .doc = "a dense row-major copy (the only layout op that copies)"};

}  // namespace

void register_layout_ops(std::vector<const OpDef*>& ops) {
  for (const OpDef* op :
       {&op_rename, &op_transpose, &op_slice, &op_select, &op_diagonal, &op_broadcast, &op_contiguous})
    ops.push_back(op);
}

Tensor select_view(const Tensor& x, int d, int64_t i) {
  Axes ax = x.axes();
  ax.erase(d);
  int64_t st[kMaxRank];
  for (int k = 0, j = 0; k < x.rank(); ++k)
    if (k != d) st[j++] = x.strides()[k];
  return Tensor(x.storage(), x.offset() + i * x.strides()[d], ax, st, x.dtype());
}

}  // namespace tenax::detail

namespace tenax {

Tensor rename(const Tensor& x, Name from, Name to) { return rename(x, AxisList{from}, AxisList{to}); }
Tensor rename(const Tensor& x, const AxisList& from, const AxisList& to) {
  Attrs a;
  a.axes = from;
  a.axes2 = to;
  return detail::apply(detail::op_rename, x, a);
}
Tensor transpose(const Tensor& x, const AxisList& order) {
  Attrs a;
  a.axes = order;
  return detail::apply(detail::op_transpose, x, a);
}
Tensor slice(const Tensor& x, Name axis, int64_t start, int64_t stop, int64_t step) {
  Attrs a;
  a.axes = AxisList{axis};
  a.i[0] = start;
  a.i[1] = stop;
  a.i[2] = step;
  return detail::apply(detail::op_slice, x, a);
}
Tensor select(const Tensor& x, Name axis, int64_t index) {
  Attrs a;
  a.axes = AxisList{axis};
  a.i[0] = index;
  return detail::apply(detail::op_select, x, a);
}
Tensor diagonal(const Tensor& x, Name row, Name col) {
  Attrs a;
  a.axes = detail::matrix_axes(row, col, x.axes(), "diagonal");
  return detail::apply(detail::op_diagonal, x, a);
}
Tensor broadcast(const Tensor& x, const Axes& extra) {
  Attrs a;
  a.shape = extra;
  return detail::apply(detail::op_broadcast, x, a);
}
Tensor contiguous(const Tensor& x) { return detail::apply(detail::op_contiguous, x); }

}  // namespace tenax
