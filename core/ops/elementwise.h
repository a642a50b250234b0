#pragma once
// Library-internal: names and registration of the elementwise op family.
#include <vector>

#include "tenax/backends/kernels.h"
#include "tenax/core/ops/op.h"

namespace tenax::detail {

const char* unary_name(UnaryOp u);
const char* binary_name(BinaryOp b);

}  // namespace tenax::detail
