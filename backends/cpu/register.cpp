// The CPU backend's one explicit registration list.
#include "tenax/backends/cpu/register.h"

namespace tenax::detail {

void register_cpu_kernels(KernelTable& t) {
  cpu::register_elementwise(t);
  cpu::register_memory(t);
  cpu::register_contract(t);
  cpu::register_linalg(t);
  cpu::register_recurrence(t);
  cpu::register_tridiagonal(t);
  cpu::register_complex(t);
  cpu::register_tridiagonal_complex(t);
}

}  // namespace tenax::detail
