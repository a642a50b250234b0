// The one oneTBB parallel loop behind every elementwise kernel's parallel paths (loop.h).
#include "tenax/backends/cpu/loop.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace tenax::cpu::loop_detail {

void parallel_ranges(int64_t n, int64_t grain, RangeBody body, void* ctx) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { body(ctx, r.begin(), r.end()); });
}

}  // namespace tenax::cpu::loop_detail
