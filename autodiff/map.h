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
  /// chunk size comes from the bytes per slice measured on a first chunk of one slice (today: the
  /// bytes of that slice's results; temporaries are not counted yet).
  int64_t memory_budget = 0;
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
