// The op registry: every family's ops, listed once, immutable after first use.
#include <cstring>

#include "tenax/core/ops/families.h"

namespace tenax {
namespace {

std::vector<const OpDef*> build() {
  std::vector<const OpDef*> ops;
  detail::register_elementwise_ops(ops);
  detail::register_select_ops(ops);
  detail::register_reduce_ops(ops);
  detail::register_dot_ops(ops);
  detail::register_layout_ops(ops);
  detail::register_join_ops(ops);
  detail::register_linalg_ops(ops);
  detail::register_recurrence_ops(ops);
  detail::register_tridiagonal_ops(ops);
  detail::register_complex_ops(ops);
  return ops;
}

}  // namespace

const std::vector<const OpDef*>& registered_ops() {
  static const std::vector<const OpDef*> ops = build();
  return ops;
}

const OpDef* find_op(const char* name) {
  for (const OpDef* op : registered_ops())
    if (std::strcmp(op->name, name) == 0) return op;
  return nullptr;
}

}  // namespace tenax
