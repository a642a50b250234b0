// A scan over a strided axis run over blocks of a batch axis (scan_blocked.h).
//
// Each step of a scan over the inner axis of (systems, i) reads one element per cache line of
// every input; over the whole batch those lines leave the cache before the next step reads their
// neighbours, so every line comes from memory once per step. Over a block of the batch axis the
// lines a step touches stay cached for the steps after it: each is read from memory once.
#include "tenax/autodiff/scan_blocked.h"

#include <algorithm>
#include <cstdlib>

#include "tenax/autodiff/slice_copy.h"
#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// A block's lines a step touches (one per batch index and strided input) fit in half a core's
// L2 with room for the step's own buffers: 512 KiB of 64-byte lines across the strided inputs.
constexpr int64_t kBlockLines = 8192;
constexpr int64_t kMinBlock = 256, kMaxBlock = 8192;

bool applies(const std::vector<Tensor>& init, const std::vector<Tensor>& xs) {
  if (g_record_state.recorder || g_record_state.trace || g_mapped.size() > 0 || init.empty() || xs.empty())
    return false;
  for (const std::vector<Tensor>* group : {&init, &xs})
    for (const Tensor& t : *group)
      if (!t.defined() || t.device().kind != Device::Kind::cpu || t.shard_id() != 0) return false;
  return true;
}

// The batch axis: the innermost axis besides `over` of the first strided x, if every carry has it
// (at its size) and every x has it at that size or not at all; its length in `n`, the number of
// strided xs in `strided`.
std::optional<Name> batch_axis(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                               int64_t& n, int64_t& strided) {
  std::optional<Name> b;
  strided = 0;
  for (const Tensor& x : xs) {
    if (!SliceStage::wanted(x, select(x, over, 0), over)) continue;
    ++strided;
    if (b) continue;
    int best = -1;
    for (int i = 0; i < x.rank(); ++i)
      if (x.axes().name(i) != over && x.axes().size(i) > 1 && (best < 0 || std::abs(x.strides()[i]) < std::abs(x.strides()[best])))
        best = i;
    if (best < 0) return std::nullopt;
    b = x.axes().name(best);
    n = x.axes().size(best);
  }
  if (!b) return std::nullopt;
  for (const Tensor& c : init)
    if (!c.has_axis(*b) || c.size(*b) != n) return std::nullopt;
  for (const Tensor& x : xs)
    if (x.has_axis(*b) && x.size(*b) != n) return std::nullopt;
  return b;
}

std::vector<Tensor> block_of(const std::vector<Tensor>& ts, Name b, int64_t from, int64_t to) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.has_axis(b) ? slice(t, b, from, to) : t);
  return out;
}

// A tensor laid out as `t` with axis b at length n.
Tensor whole_like(const Tensor& t, Name b, int64_t n) {
  Axes ax;
  for (int i = 0; i < t.rank(); ++i) ax.push_back({t.axes().name(i), t.axes().name(i) == b ? n : t.axes().size(i)});
  return empty(ax, t.dtype(), t.device());
}

}  // namespace

std::optional<ScanResult> scan_in_blocks(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                                         const BlockScan& run) {
  if (!applies(init, xs)) return std::nullopt;
  int64_t n = 0, strided = 0;
  const std::optional<Name> b = batch_axis(init, xs, over, n, strided);
  if (!b) return std::nullopt;
  const int64_t target = std::clamp(kBlockLines / strided, kMinBlock, kMaxBlock);
  if (n < 2 * target) return std::nullopt;
  const int64_t blocks = (n + target - 1) / target, size = (n + blocks - 1) / blocks;
  BlockOf first;
  first.local = &*b;
  std::optional<ScanResult> r0;
  try {
    r0 = run(block_of(init, *b, 0, size), block_of(xs, *b, 0, size), first);
  } catch (const Error&) {
    // The step failed on a block (it closes over a tensor with the whole axis, say): the scan
    // over the whole axis runs instead and reports what is wrong with it, if anything.
    return std::nullopt;
  }
  if (!r0) return std::nullopt;
  ScanResult out;
  for (const Tensor& c : r0->carry) out.carry.push_back(whole_like(c, *b, n));
  for (const Tensor& y : r0->ys) out.ys.push_back(whole_like(y, *b, n));
  for (int64_t from = 0; from < n; from += size) {
    const int64_t to = std::min(n, from + size);
    std::vector<Tensor> ys_into = block_of(out.ys, *b, from, to);
    std::optional<ScanResult> r;
    if (from == 0) {
      r = std::move(r0);
      for (size_t j = 0; j < ys_into.size(); ++j) copy_into(ys_into[j], r->ys[j]);
    } else {
      BlockOf later;
      later.ys_into = &ys_into;
      r = run(block_of(init, *b, from, to), block_of(xs, *b, from, to), later);
      if (!r) throw Error("[scan] internal: a block of '" + b->str() + "' refused after the first ran");
      for (size_t j = 0; j < ys_into.size(); ++j)
        if (r->ys[j].data_ptr() != ys_into[j].data_ptr()) copy_into(ys_into[j], r->ys[j]);
    }
    for (size_t k = 0; k < out.carry.size(); ++k) copy_into(slice(out.carry[k], *b, from, to), r->carry[k]);
  }
  return out;
}

}  // namespace tenax::detail
