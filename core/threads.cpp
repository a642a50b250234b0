// The process-wide thread limit: one oneTBB global_control, owned here.
#include "tenax/core/threads.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include <tbb/global_control.h>

#include "tenax/core/env.h"
#include "tenax/core/error.h"

namespace tenax {
namespace {

std::mutex g_mutex;
std::unique_ptr<tbb::global_control> g_limit;  // guarded by g_mutex

// TENAX_NUM_THREADS: 0 when unset or empty; a positive integer; anything else is an Error.
int environment_limit() { return int(detail::env_integer("TENAX_NUM_THREADS").value_or(0)); }

void set_limit(int n) {  // caller holds g_mutex
  g_limit.reset();
  if (n > 0) g_limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, size_t(n));
}

}  // namespace

void set_num_threads(int n) {
  if (n < 0) throw Error("[threads] set_num_threads needs n >= 0 (0: the default), got " + std::to_string(n));
  const int limit = n > 0 ? n : environment_limit();
  const std::lock_guard<std::mutex> lock(g_mutex);
  set_limit(limit);
}

int num_threads() {
  return int(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
}

namespace detail {
void apply_thread_limit_from_environment() {
  static const int limit = environment_limit();  // throws again at the next op while invalid
  static std::once_flag once;
  std::call_once(once, [] {
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_limit) set_limit(limit);
  });
}
}  // namespace detail

}  // namespace tenax
