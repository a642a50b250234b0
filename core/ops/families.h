#pragma once
// Library-internal: each op family's registration function, called once by the registry.
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

}  // namespace tenax::detail
