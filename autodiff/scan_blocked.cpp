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

// The axis of x with the smallest stride besides `over` (and size 1), or -1.
int innermost_other(const Tensor& x, Name over) {
  int best = -1;
  for (int i = 0; i < x.rank(); ++i) {
    if (x.axes().name(i) == over || x.axes().size(i) == 1) continue;
    if (best < 0 || std::abs(x.strides()[i]) < std::abs(x.strides()[best])) best = i;
  }
  return best;
}

// The batch axis: the innermost axis besides `over` of the first strided x, if every carry has it
// (at its size) and every x has it at that size or not at all; its length in `n`, the number of
// strided xs in `strided`.
std::optional<Name> batch_axis(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                               int64_t& n, int64_t& strided) {
  int first = -1;
  strided = 0;
  for (size_t k = 0; k < xs.size(); ++k)
    if (SliceStage::wanted(xs[k], select(xs[k], over, 0), over)) {
      ++strided;
      if (first < 0) first = static_cast<int>(k);
    }
  if (first < 0) return std::nullopt;
  const Tensor& x = xs[static_cast<size_t>(first)];
  const int i = innermost_other(x, over);
  if (i < 0) return std::nullopt;
  const Name b = x.axes().name(i);
  n = x.axes().size(i);
  for (const Tensor& c : init)
    if (!c.has_axis(b) || c.size(b) != n) return std::nullopt;
  for (const Tensor& t : xs)
    if (t.has_axis(b) && t.size(b) != n) return std::nullopt;
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


// Whether a tape records and tracks one of the scan's inputs.
bool any_tracked(const std::vector<Tensor>& init, const std::vector<Tensor>& xs) {
  bool tracked = false;
  if (g_record_state.recorder)
    for (const std::vector<Tensor>* group : {&init, &xs})
      for (const Tensor& t : *group) tracked = tracked || is_tracked(t);
  return tracked;
}

// One scan in blocks of `axis`: the first block (its step checked local along the axis), then
// the others into the whole outputs, then, under a tape, one node for all.
class Blocks {
 public:
  Blocks(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name axis, int64_t n, int64_t size,
         const ScanOptions& share, bool tracked)
      : init_(init), xs_(xs), axis_(axis), n_(n), size_(size), node_(std::make_shared<BlockedRuns>()) {
    node_->axis = axis;
    node_->whole = n;
    first_.local = &axis_;
    first_.options = &share;
    first_.tracked = tracked;
  }

  // The first block, from which the whole outputs are made; false when the step is refused.
  bool start(const BlockScan& run) {
    std::shared_ptr<ScanRun> r;
    first_.run_out = &r;
    std::optional<ScanResult> r0;
    try {
      r0 = run(block_of(init_, axis_, 0, size_), block_of(xs_, axis_, 0, size_), first_);
    } catch (const Error&) {
      // The step failed on a block (it closes over a tensor with the whole axis, say): the scan
      // over the whole axis runs instead and reports what is wrong with it, if anything.
      return false;
    }
    if (!r0) return false;
    for (const Tensor& c : r0->carry) out_.carry.push_back(whole_like(c, axis_, n_));
    for (const Tensor& y : r0->ys) out_.ys.push_back(whole_like(y, axis_, n_));
    store(*r0, r, 0, std::min(n_, size_));
    return true;
  }

  // Every later block, each writing its outputs into the whole ones.
  void rest(const BlockScan& run) {
    for (int64_t from = size_; from < n_; from += size_) {
      const int64_t to = std::min(n_, from + size_);
      std::vector<Tensor> ys_into = block_of(out_.ys, axis_, from, to);
      std::shared_ptr<ScanRun> r;
      BlockOf later = first_;
      later.local = nullptr;
      later.ys_into = &ys_into;
      later.run_out = &r;
      std::optional<ScanResult> res = run(block_of(init_, axis_, from, to), block_of(xs_, axis_, from, to), later);
      if (!res) throw Error("[scan] internal: a block of '" + axis_.str() + "' refused after the first ran");
      store(*res, r, from, to);
    }
  }

  // The whole outputs, recorded as one node when the blocks recorded their runs.
  ScanResult finish() {
    if (!node_->runs.empty()) {
      if (node_->runs.size() != blocks_)
        throw Error("[scan] internal: some blocks of '" + axis_.str() + "' recorded their reverse pass, others not");
      record_blocks(std::move(node_), init_, xs_, out_);
    }
    return std::move(out_);
  }

 private:
  void store(const ScanResult& r, const std::shared_ptr<ScanRun>& run, int64_t from, int64_t to) {
    std::vector<Tensor> ys_into = block_of(out_.ys, axis_, from, to);
    for (size_t j = 0; j < ys_into.size(); ++j)
      if (r.ys[j].data_ptr() != ys_into[j].data_ptr()) copy_into(ys_into[j], r.ys[j]);
    for (size_t k = 0; k < out_.carry.size(); ++k) copy_into(block_of({out_.carry[k]}, axis_, from, to)[0], r.carry[k]);
    if (run) {
      node_->runs.push_back(run);
      node_->ranges.emplace_back(from, to);
    }
    ++blocks_;
  }

  const std::vector<Tensor>& init_;
  const std::vector<Tensor>& xs_;
  Name axis_;
  int64_t n_, size_;
  std::shared_ptr<BlockedRuns> node_;
  BlockOf first_;
  ScanResult out_;
  size_t blocks_ = 0;
};

}  // namespace

std::optional<ScanResult> scan_in_blocks(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                                         const ScanOptions& options, const BlockScan& run) {
  if (!applies(init, xs)) return std::nullopt;
  int64_t n = 0, strided = 0;
  const std::optional<Name> b = batch_axis(init, xs, over, n, strided);
  if (!b) return std::nullopt;
  const bool tracked = any_tracked(init, xs);
  // Under a tape the reverse pass reads each strided input again and adds into its adjoint, beside
  // the carries' checkpoints: blocks a quarter as wide (the width bench_tridiagonal's
  // ScanThomasGradient runs fastest at; half and full width were slower).
  const int64_t target = std::clamp(kBlockLines / (tracked ? 4 * strided : strided), kMinBlock, kMaxBlock);
  if (n < 2 * target) return std::nullopt;
  const int64_t count = (n + target - 1) / target, size = (n + count - 1) / count;
  const ScanOptions share = shared_out(options, count);
  Blocks blocks(init, xs, *b, n, size, share, tracked);
  if (!blocks.start(run)) return std::nullopt;
  blocks.rest(run);
  return blocks.finish();
}

}  // namespace tenax::detail
