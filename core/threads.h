#pragma once
// How many threads Tenax's parallel loops may use, for the whole process.

namespace tenax {

/// Limits the threads that run Tenax's parallel loops (oneTBB's workers and the calling thread)
/// to `n`, process-wide; 0 returns to the default: the environment variable TENAX_NUM_THREADS when
/// it is set (read when the first op runs), else every core. Throws Error for n < 0. A limit the
/// host program sets itself with tbb::global_control applies as well: the lower one wins.
void set_num_threads(int n);

/// The limit in force: at most this many threads run a Tenax loop.
[[nodiscard]] int num_threads();

namespace detail {
/// Applies TENAX_NUM_THREADS (once; the backends call it when their kernels are first needed).
/// Throws Error when it is set to anything but a positive integer.
void apply_thread_limit_from_environment();
}  // namespace detail

}  // namespace tenax
