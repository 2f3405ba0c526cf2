// Runs an op's VjpGraph (rules/engine/vjp.h) with the float64 references: the oracle for
// backward passes, as the references are for forward ones.
#pragma once

#include <optional>
#include <vector>

#include "reference/tensor.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/vjp.h"

namespace spmd::checker {

// Returns the gradient of every forward input of `op` (nothing where the graph gives
// none): builds the op's graph from the inputs' shapes and `attrs`, then runs each call's
// reference in order. `outputs` are the forward outputs, `output_grads` one cotangent per
// output (its shape). Throws SpmdError(kInvalidArgument) naming the field ("vjp.calls[k]
// .operands[j]", "vjp.input_grads[i]") for a graph that names an unknown op, refers to an
// operand out of range or to a later call, or gives a gradient of the wrong shape; an
// SpmdError from a call's reference is rethrown with "vjp.calls[k] (op)" in front; and
// SpmdError(kUnsupported, "vjp") when the op has no VJP.
std::vector<std::optional<reference::Tensor>> EvaluateVjp(const OpDecl& op,
                                                          const reference::Tensors& inputs,
                                                          const Attrs& attrs,
                                                          const reference::Tensors& outputs,
                                                          const reference::Tensors& output_grads);

}  // namespace spmd::checker
