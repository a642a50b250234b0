#pragma once
// The CPU backend's registration entry points, one per kernel family (explicit: static
// self-registration gets dropped by linkers).
#include "tenax/backends/kernels.h"

namespace tenax::cpu {

void register_elementwise(detail::KernelTable& t);
void register_memory(detail::KernelTable& t);
void register_contract(detail::KernelTable& t);
void register_linalg(detail::KernelTable& t);
void register_recurrence(detail::KernelTable& t);
void register_tridiagonal(detail::KernelTable& t);
/// The complex dtypes' kernels (backends/cpu/complex.cpp).
void register_complex(detail::KernelTable& t);
/// Complex tridiagonal solves (backends/cpu/tridiagonal_complex.cpp).
void register_tridiagonal_complex(detail::KernelTable& t);

}  // namespace tenax::cpu
