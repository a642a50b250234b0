#pragma once
// One printable report of the memory Tenax holds: every device's allocator and, given a tape,
// what that tape keeps for its reverse pass.
#include <string>

#include "tenax/autodiff/tape.h"

namespace tenax {

/// Lines of "name: figures" in bytes: for the host and each visible CUDA device, what is in use,
/// the peak, the buffers and bytes handed out since the allocator's last reset and the memory
/// budget (set_memory_budget); with a tape, its records and variables, the bytes its records keep
/// for the reverse pass (a scan's checkpoints and kept intermediates and a map's inputs included)
/// and the adjoints of its last sweep. The figures are allocator_stats() and Tape::stats().
std::string memory_report(const Tape* tape = nullptr);

}  // namespace tenax
