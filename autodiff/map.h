#pragma once
// map: a batched serial map over one named axis, chunk by chunk, each chunk vectorised like nmap,
// with a gradient that recomputes each chunk so memory stays bounded by the chunk.
#include <cstdint>

#include "tenax/autodiff/nmap.h"

namespace tenax {

struct MapOptions {
  /// Slices per chunk (the last chunk may be shorter). 0: derived from memory_budget, or all.
  int64_t batch_size = 0;
  /// When > 0 and batch_size is 0: bytes allowed for one chunk's outputs and temporaries; the
  /// chunk size is budget / (peak bytes this thread allocated while computing a first chunk of
  /// one slice: results and temporaries).
  int64_t memory_budget = 0;
  /// Run up to this many chunks at a time on oneTBB workers (forward and rematerialised reverse);
  /// peak memory grows to about parallel_chunks x one chunk. Chunks recorded on the tape
  /// (rematerialize = false under a tape) always run one at a time on the calling thread.
  int64_t parallel_chunks = 1;
  /// Reverse mode recomputes each chunk's forward (memory O(batch_size)); false records every
  /// chunk on the tape instead (memory O(axis size), no recomputation).
  bool rematerialize = true;
};

/// f applied to every slice of `args` along `over`, results stacked along `over`, computed in
/// chunks one after another; f runs vectorised on each chunk (nmaps inside f are not re-chunked).
/// Arguments without `over` are shared by every chunk. With rematerialize, f must receive every
/// tracked tensor it uses through `args`: closing over one is an Error (its gradient would be lost).
std::vector<Tensor> map(const MultiFunction& f, Name over, const std::vector<Tensor>& args,
                        const MapOptions& options = {});

}  // namespace tenax
