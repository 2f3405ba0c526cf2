// The ops with an exchange inside (OpDecl::exchange): each has, besides its own kernel and
// reference, the phases KernelRef{op, Phase::kStats} and {op, Phase::kFinish}. The
// phase tables of the reference, the CPU and the CUDA kernels are generated from this
// list, so a missing phase does not link.
#pragma once

#include "rules/ops/row_exchange_ops.h"

#define SPMD_FOR_EACH_EXCHANGE_OP(X) \
  X(c_softmax_with_cross_entropy) X(c_softmax_with_multi_label_cross_entropy) X(batch_norm) \
  SPMD_FOR_EACH_ROW_EXCHANGE_OP(X)
