// The tiny contractions (contract_fixed.h) built for AVX2 + FMA: a 4-wide row of float64 in one
// vector, fused multiply-adds. Compiled with -mavx2 -mfma (backends/CMakeLists.txt) and called
// only where the CPU has both (cpu_avx2()).
#include "tenax/backends/cpu/avx2.h"
#include "tenax/backends/cpu/contract_fixed.h"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "contract_avx2.cpp must be compiled with -mavx2 -mfma"
#endif

namespace tenax::cpu {

ContractFn fixed_kernel_avx2_f64(detail::ContractPlan& p, int m, int n, int k) {
  return fixed_kernel<double>(p, m, n, k);
}
ContractFn fixed_kernel_avx2_f32(detail::ContractPlan& p, int m, int n, int k) {
  return fixed_kernel<float>(p, m, n, k);
}

}  // namespace tenax::cpu
