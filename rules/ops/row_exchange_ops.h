// The row reductions whose reduced axis may stay sharded through an exchange
// (OpDecl::exchange; the arithmetic in rules/ops/norm_pieces.h, cross_entropy_with_softmax's
// in rules/ops/softmax_pieces.h): each has the phases
// Phase::kStats and kFinish (rules/engine/phase.h). The reference, CPU and CUDA tables, keyed by
// (op, phase), are generated from this list, so a missing phase does not link.
#pragma once

#define SPMD_FOR_EACH_ROW_EXCHANGE_OP(X) \
  X(softmax) X(log_softmax) X(softmax_grad) X(logsumexp) X(layer_norm) X(rms_norm) X(cumsum) \
  X(cross_entropy_with_softmax) X(layer_norm_grad) X(rms_norm_grad) X(cummax) X(cummin)
