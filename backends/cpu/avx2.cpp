// Whether the CPU backend's AVX2 + FMA builds run (avx2.h). Compiled for the baseline, like every
// caller of the AVX2 entry points.
#include "tenax/backends/cpu/avx2.h"

#include "tenax/core/env.h"

namespace tenax::cpu {

bool cpu_avx2() {
#if defined(TENAX_HAVE_AVX2_KERNELS)
  static const bool on = [] {
    if (!detail::env_switch("TENAX_CPU_AVX2")) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return on;
#else
  return false;
#endif
}

}  // namespace tenax::cpu
