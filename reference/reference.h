// Single-device float64 definitions of every op: plain loops, obviously right.
// The oracle the checkers compare against; it never uses kernels/ or runtime/.
#pragma once

#include <string_view>

#include "reference/tensor.h"
#include "rules/attrs.h"
#include "rules/op_list.h"

namespace spmd::reference {

// Runs one op on whole inputs. `attrs` holds every attr the op declares (docs/OPS.md).
// Throws SpmdError(kInvalidArgument) naming the field for inputs the op cannot take.
using ReferenceFn = Tensors (*)(const Tensors& inputs, const Attrs& attrs);

namespace ops {
#define SPMD_DECLARE_REFERENCE(name) Tensors name(const Tensors& inputs, const Attrs& attrs);
SPMD_FOR_EACH_OP(SPMD_DECLARE_REFERENCE)
#undef SPMD_DECLARE_REFERENCE
}  // namespace ops

// Returns the reference of `op`, or nullptr when spmdkit has no such op.
ReferenceFn FindReference(std::string_view op);

}  // namespace spmd::reference
