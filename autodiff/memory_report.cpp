// memory_report: allocator_stats() of every device and a tape's stats(), as lines of text.
#include "tenax/autodiff/memory_report.h"

#include <string>

#include "tenax/backends/kernels.h"
#include "tenax/core/storage.h"

namespace tenax {
namespace {

std::string device_line(Device d) {
  const AllocatorStats s = allocator_stats(d);
  const int64_t budget = memory_budget(d);
  return d.str() + ": " + std::to_string(s.bytes_in_use) + " bytes in use, peak " + std::to_string(s.peak_bytes) +
         ", " + std::to_string(s.allocations) + " buffers / " + std::to_string(s.allocated_bytes) +
         " bytes allocated since the last reset, budget " + (budget > 0 ? std::to_string(budget) : "none") + "\n";
}

}  // namespace

std::string memory_report(const Tape* tape) {
  std::string out = device_line(Device::cpu());
  for (int i = 0; i < detail::cuda_device_count(); ++i) out += device_line(Device::cuda(i));
  if (tape) {
    const TapeStats t = tape->stats();
    out += "tape: " + std::to_string(t.records) + " records (" + std::to_string(t.records_by_value) + " by value), " + std::to_string(t.variables) + " variables, " +
           std::to_string(tape->bytes()) + " bytes held (" + std::to_string(t.residual_bytes) +
           " of residuals for the reverse pass), last sweep's adjoints " + std::to_string(t.adjoint_buffers) +
           " buffers / " + std::to_string(t.adjoint_bytes) + " bytes\n";
  }
  return out;
}

}  // namespace tenax
