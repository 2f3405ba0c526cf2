// Single-device float64 definitions of every op: plain loops, obviously right.
// The oracle the checkers compare against; it never uses kernels/ or runtime/.
#pragma once

#include <string_view>

#include "reference/tensor.h"
#include "rules/model/attrs.h"
#include "rules/engine/op_list.h"
#include "rules/engine/phase.h"
#include "rules/ops/exchange_ops.h"

namespace spmd::reference {

// Runs one op on whole inputs. `attrs` holds every attr the op declares (docs/OPS.md).
// Throws SpmdError(kInvalidArgument) naming the field for inputs the op cannot take.
using ReferenceFn = Tensors (*)(const Tensors& inputs, const Attrs& attrs);

namespace ops {
#define SPMD_DECLARE_REFERENCE(name) Tensors name(const Tensors& inputs, const Attrs& attrs);
SPMD_FOR_EACH_OP(SPMD_DECLARE_REFERENCE)
#undef SPMD_DECLARE_REFERENCE
// The phases of the ops with an exchange inside (OpDecl::exchange), found by FindReference
// as KernelRef{op, Phase::kStats} and KernelRef{op, Phase::kFinish}.
// The softmax cross entropies' phases are in ops_loss.cc, the other row reductions' (whose
// reduced axis may stay sharded) in ops_norm_exchange.cc.
#define SPMD_DECLARE_EXCHANGE_PHASES(name)                         \
  Tensors name##_stats(const Tensors& inputs, const Attrs& attrs); \
  Tensors name##_finish(const Tensors& inputs, const Attrs& attrs);
SPMD_FOR_EACH_EXCHANGE_OP(SPMD_DECLARE_EXCHANGE_PHASES)
#undef SPMD_DECLARE_EXCHANGE_PHASES
}  // namespace ops

// Returns the reference of an op (a name) or of one phase of its exchange
// (KernelRef{op, phase}), or nullptr when spmdkit has no such op or phase.
ReferenceFn FindReference(const KernelRef& kernel);

}  // namespace spmd::reference
