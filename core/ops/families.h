#pragma once
// Library-internal: each op family's registration function, called once by the registry, and the
// capture rules of the families with kernels of their own.
#include <vector>

#include "tenax/core/ops/op.h"

namespace tenax::detail {

void register_elementwise_ops(std::vector<const OpDef*>& ops);
void register_select_ops(std::vector<const OpDef*>& ops);
void register_reduce_ops(std::vector<const OpDef*>& ops);
void register_dot_ops(std::vector<const OpDef*>& ops);
void register_layout_ops(std::vector<const OpDef*>& ops);
void register_join_ops(std::vector<const OpDef*>& ops);
void register_linalg_ops(std::vector<const OpDef*>& ops);
void register_recurrence_ops(std::vector<const OpDef*>& ops);
void register_tridiagonal_ops(std::vector<const OpDef*>& ops);
void register_complex_ops(std::vector<const OpDef*>& ops);

// Each family with kernels of its own (not elementwise) installs their capture rules into the
// capturing kernel table of device kind 0 (host) or 1 (CUDA); core/ops/capture.cpp calls them.
struct KernelTable;
void install_dot_capture(KernelTable& capturing, int device_kind);
void install_linalg_capture(KernelTable& capturing, int device_kind);
void install_recurrence_capture(KernelTable& capturing, int device_kind);
void install_tridiagonal_capture(KernelTable& capturing, int device_kind);

}  // namespace tenax::detail
