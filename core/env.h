#pragma once
// Library-internal: on/off switches read from the environment (TENAX_SCALAR_LOOPS,
// TENAX_SCAN_IN_PLACE, TENAX_CUDA_GRAPHS, TENAX_CUDA_FUSION, TENAX_CPU_AVX2,
// TENAX_TRIDIAGONAL_CHUNKS), for comparison and
// debugging.
#include <cstdlib>
#include <cstring>

namespace tenax::detail {

/// Whether the switch `name` is on: it is, unless the environment variable is set to "0".
inline bool env_switch(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace tenax::detail
