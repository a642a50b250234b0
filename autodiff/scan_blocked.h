#pragma once
// Library-internal: a scan whose scanned axis is not the outer one of its inputs (each step's
// slice strided across memory), run as independent scans over cache-sized blocks of another axis
// that the step treats elementwise.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tenax/autodiff/scan.h"

namespace tenax::detail {

struct ScanRun;

/// What a scan over one block is told: `local`, for the first block, the axis its traced step
/// must be local along (ScanPlan::local_along; when it is not, nothing runs); `ys_into`, for the
/// later ones, where its stacked outputs go (views of the whole outputs); `options`: the scan's,
/// with the memory budgets shared out among the blocks. Where a tape records (`tracked`: some
/// input of the whole scan is tracked), the block's run is handed back in `run_out`, not
/// recorded: the blocks' runs are recorded as one node.
struct BlockOf {
  const Name* local = nullptr;
  const std::vector<Tensor>* ys_into = nullptr;
  const ScanOptions* options = nullptr;
  bool tracked = false;
  std::shared_ptr<ScanRun>* run_out = nullptr;
};

/// Runs the scan on one block's init and xs; nullopt when the block's step was refused.
using BlockScan = std::function<std::optional<ScanResult>(const std::vector<Tensor>& init,
                                                          const std::vector<Tensor>& xs, const BlockOf& block)>;

/// The scan run block by block along a batch axis where that applies and pays: nothing is traced
/// and no nmap is active; every tensor on the host and none sharded; some x's slices are strided
/// (autodiff/slice_copy.h, SliceStage::wanted); the batch axis (that x's innermost axis besides
/// `over`) is an axis of every carry, at least two blocks long; and the step is local along it.
/// Returns nullopt when it does not apply (then at most the first block ran, its results dropped:
/// refused, or failing with an Error, which the scan over the whole axis raises again if it is
/// one of the whole scan).
/// Where a tape records, the blocks' runs are one node on it, whose reverse pass runs each
/// block's on the blocks of the cotangents and adjoints.
std::optional<ScanResult> scan_in_blocks(const std::vector<Tensor>& init, const std::vector<Tensor>& xs, Name over,
                                         const ScanOptions& options, const BlockScan& run);

}  // namespace tenax::detail
