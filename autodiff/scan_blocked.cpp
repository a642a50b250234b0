// A scan over a strided axis run over blocks of a batch axis (scan_blocked.h).
//
// Each step of a scan over the inner axis of (systems, i) reads one element per cache line of
// every input; over the whole batch those lines leave the cache before the next step reads their
// neighbours, so every line comes from memory once per step. Over a block of the batch axis the
// lines a step touches stay cached for the steps after it: each is read from memory once.
#include "tenax/autodiff/scan_blocked.h"

#include <algorithm>
#include <cstdlib>

#include "tenax/autodiff/recording.h"
#include "tenax/autodiff/scan_run.h"
#include "tenax/autodiff/slice_copy.h"
#include "tenax/core/ops.h"

namespace tenax::detail {
namespace {

// A block's lines a step touches (one per batch index and strided input) fit in half a core's
// L2 with room for the step's own buffers: 512 KiB of 64-byte lines across the strided inputs.
constexpr int64_t kBlockLines = 8192;
constexpr int64_t kMinBlock = 256, kMaxBlock = 8192;

bool applies(const std::vector<Tensor>& init, const std::vector<Tensor>& xs) {
  if (g_record_state.trace || g_mapped.size() > 0 || init.empty() || xs.empty()) return false;
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

// The block [from, to) of axis b of each tensor that has it (views, not recorded on a tape).
std::vector<Tensor> block_of(const std::vector<Tensor>& ts, Name b, int64_t from, int64_t to) {
  PauseRecording pause;
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.defined() && t.has_axis(b) ? slice(t, b, from, to) : t);
  return out;
}

// The axes of `t` with axis b at length n (in t's order).
Axes whole_axes(const Tensor& t, Name b, int64_t n) {
  Axes ax;
  for (int i = 0; i < t.rank(); ++i) ax.push_back({t.axes().name(i), t.axes().name(i) == b ? n : t.axes().size(i)});
  return ax;
}

Tensor whole_like(const Tensor& t, Name b, int64_t n) { return empty(whole_axes(t, b, n), t.dtype(), t.device()); }

// The blocks' runs as one node of the tape: the reverse pass runs each block's on its block of
// the cotangents and of the adjoints of init and xs; the parameters' adjoints (no block axis)
// and those of xs without it collect every block's contribution.
struct BlockedRuns final : CustomNode {
  std::vector<std::shared_ptr<ScanRun>> runs;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  Name axis;
  int64_t whole = 0;            // its length
  size_t n_blocked_inputs = 0;  // init and xs

  [[nodiscard]] const char* name() const override { return "scan"; }
  [[nodiscard]] bool batched_vjp() const override { return true; }
  [[nodiscard]] int64_t residual_bytes() const override {
    int64_t bytes = 0;
    for (const auto& r : runs) bytes += r->residual_bytes();
    return bytes;
  }
  // Each block's tangents from its block of the inputs' (parameters' and unblocked xs' whole),
  // written into the whole outputs' tangents.
  bool jvp(const std::vector<Tensor>& tangents, const Axes& batch, std::vector<Tensor>& out) override {
    const auto nb = static_cast<std::ptrdiff_t>(n_blocked_inputs);
    out.clear();
    for (size_t k = 0; k < runs.size(); ++k) {
      const auto [from, to] = ranges[k];
      std::vector<Tensor> in = block_of({tangents.begin(), tangents.begin() + nb}, axis, from, to), part;
      in.insert(in.end(), tangents.begin() + nb, tangents.end());
      if (!runs[k]->jvp(in, batch, part)) return false;
      out.resize(part.size());
      for (size_t j = 0; j < part.size(); ++j) {
        if (!part[j].defined()) continue;
        if (!out[j].defined()) out[j] = zeros(whole_axes(part[j], axis, whole), part[j].dtype(), part[j].device());
        PauseRecording pause;
        copy_into(slice(out[j], axis, from, to), part[j]);
      }
    }
    return true;
  }
  void vjp(const std::vector<Tensor>& cot, const std::vector<Tensor>& adj) override {
    for (size_t k = 0; k < runs.size(); ++k) {
      const auto [from, to] = ranges[k];
      std::vector<Tensor> a = block_of({adj.begin(), adj.begin() + static_cast<std::ptrdiff_t>(n_blocked_inputs)},
                                       axis, from, to);
      a.insert(a.end(), adj.begin() + static_cast<std::ptrdiff_t>(n_blocked_inputs), adj.end());
      runs[k]->vjp(block_of(cot, axis, from, to), a);
    }
  }
};

// The options of one of `blocks` blocks: each keeps its share of the memory budgets.
ScanOptions shared_out(const ScanOptions& o, int64_t blocks) {
  ScanOptions s = o;
  if (s.memory_budget > 0) s.memory_budget = std::max<int64_t>(1, s.memory_budget / blocks);
  if (s.residual_budget > 0) s.residual_budget /= blocks;
  return s;
}

// Records the blocks' runs as one node with the whole scan's inputs and outputs.
void record_blocks(std::shared_ptr<BlockedRuns> node, const std::vector<Tensor>& init,
                   const std::vector<Tensor>& xs, ScanResult& out) {
  const std::vector<Tensor>& params = node->runs.front()->params;
  for (const auto& r : node->runs)
    if (r->params.size() != params.size() ||
        !std::equal(params.begin(), params.end(), r->params.begin(),
                    [](const Tensor& a, const Tensor& b) { return a.data_ptr() == b.data_ptr(); }))
      throw Error("[scan] internal: the blocks of a scan closed over different tensors");
  std::vector<Tensor> inputs = init, outputs = out.carry;
  inputs.insert(inputs.end(), xs.begin(), xs.end());
  inputs.insert(inputs.end(), params.begin(), params.end());
  outputs.insert(outputs.end(), out.ys.begin(), out.ys.end());
  node->n_blocked_inputs = init.size() + xs.size();
  g_record_state.recorder->record_custom(std::move(node), inputs, outputs);
  const auto nc = static_cast<std::ptrdiff_t>(out.carry.size());
  out.carry.assign(outputs.begin(), outputs.begin() + nc);
  out.ys.assign(outputs.begin() + nc, outputs.end());
}


}  // namespace

std::optional<ScanResult> scan_in_blocks(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                                         const ScanOptions& options, const BlockScan& run) {
  if (!applies(init, xs)) return std::nullopt;
  int64_t n = 0, strided = 0;
  const std::optional<Name> b = batch_axis(init, xs, over, n, strided);
  if (!b) return std::nullopt;
  bool tracked = false;
  if (g_record_state.recorder)
    for (const std::vector<Tensor>* group : {&init, &xs})
      for (const Tensor& t : *group) tracked = tracked || is_tracked(t);
  // Under a tape the reverse pass reads each strided input again and adds into its adjoint, beside
  // the carries' checkpoints: blocks a quarter as wide (the width bench_tridiagonal's
  // ScanThomasGradient runs fastest at; half and full width were slower).
  const int64_t target = std::clamp(kBlockLines / (tracked ? 4 * strided : strided), kMinBlock, kMaxBlock);
  if (n < 2 * target) return std::nullopt;
  const int64_t blocks = (n + target - 1) / target, size = (n + blocks - 1) / blocks;
  const ScanOptions share = shared_out(options, blocks);
  auto node = std::make_shared<BlockedRuns>();
  node->axis = *b;
  node->whole = n;
  BlockOf first;
  first.local = &*b;
  first.options = &share;
  first.tracked = tracked;
  std::shared_ptr<ScanRun> run0;
  first.run_out = &run0;
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
  size_t count = 0;
  for (int64_t from = 0; from < n; from += size, ++count) {
    const int64_t to = std::min(n, from + size);
    std::vector<Tensor> ys_into = block_of(out.ys, *b, from, to);
    std::optional<ScanResult> r;
    std::shared_ptr<ScanRun> run_k;
    if (from == 0) {
      r = std::move(r0);
      run_k = run0;
      for (size_t j = 0; j < ys_into.size(); ++j) copy_into(ys_into[j], r->ys[j]);
    } else {
      BlockOf later = first;
      later.local = nullptr;
      later.ys_into = &ys_into;
      later.run_out = &run_k;
      r = run(block_of(init, *b, from, to), block_of(xs, *b, from, to), later);
      if (!r) throw Error("[scan] internal: a block of '" + b->str() + "' refused after the first ran");
      for (size_t j = 0; j < ys_into.size(); ++j)
        if (r->ys[j].data_ptr() != ys_into[j].data_ptr()) copy_into(ys_into[j], r->ys[j]);
    }
    for (size_t k = 0; k < out.carry.size(); ++k) copy_into(block_of({out.carry[k]}, *b, from, to)[0], r->carry[k]);
    if (run_k) {
      node->runs.push_back(run_k);
      node->ranges.emplace_back(from, to);
    }
  }
  if (!node->runs.empty()) {
    if (node->runs.size() != count)
      throw Error("[scan] internal: some blocks of '" + b->str() + "' recorded their reverse pass, others not");
    record_blocks(std::move(node), init, xs, out);
  }
  return out;
}

}  // namespace tenax::detail
