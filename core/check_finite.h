#pragma once
// Debug checks for NaN and Inf: when on, every op's output (forward) and every adjoint a VJP rule
// writes (backward) is checked, and the first non-finite value raises NumericError naming the op,
// the element, the pass and — inside a scan or map — the step or chunk. Off by default (it reads
// every value once more); on with set_check_finite(true) or the environment variable
// TENAX_CHECK_FINITE=1 (read at start-up). A model graph's errors also carry the node's JSON pointer.
namespace tenax {

/// Turns the checks on or off for every thread.
void set_check_finite(bool on);
/// Whether the checks are on.
[[nodiscard]] bool check_finite();

}  // namespace tenax
