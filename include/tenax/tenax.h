#pragma once
// Tenax: named-axis tensors with tape-based differentiation. The one header users include.
#include "tenax/autodiff/grad.h"
#include "tenax/autodiff/tape.h"
#include "tenax/core/creation.h"
#include "tenax/core/device.h"
#include "tenax/core/dtype.h"
#include "tenax/core/error.h"
#include "tenax/core/ops.h"
#include "tenax/core/ops/op.h"
#include "tenax/core/storage.h"
#include "tenax/core/tensor.h"
#include "tenax/named/axes.h"
#include "tenax/named/name.h"
