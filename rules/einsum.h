// The einsum engine (SEMANTICS.md §4, DECISIONS.md): one notation string per operand,
// one letter per dim; shared letters are one factor; `1` is a size-1 broadcast dim that is
// never sharded.
//
// Worked example (SEMANTICS.md §4 step 6): matmul `mk,kn->mn` on mesh 2x3 with
// x = [1, 0], y = [-1, -1]: walk x: m <- [1], k <- [0]; walk y: nothing claims.
// Required x = [1, 0], y = [0, -1]; out = [1, -1], k is absent from out and mapped to
// axis 0, so out is partial {0: sum}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/dist_attr.h"
#include "rules/mesh.h"

namespace spmd {

// Which partial inputs an op keeps instead of reducing them first (DECISIONS.md).
enum class PartialAcceptance {
  kNone,         // every partial input is reduced (the default)
  kSumOfAll,     // add/subtract: axis a stays partial(sum) when every input is
  kMultilinear,  // multiply/matmul/einsum: partial(sum) stays in the first operand having it
  kSameOp,       // reductions: partial with `accepted_op` stays (sum on sum, max on max)
  kAnyOp,        // shape ops that only move elements: every partial stays
};

// A rule as a value: the notation of every operand plus what the op adds.
struct EinsumSpec {
  std::vector<std::string> inputs;   // one letter per dim; '1' = broadcast dim
  std::vector<std::string> outputs;
  std::string forced_replicated;     // factors the local kernel needs whole (softmax axis)
  ReduceOp reduce = ReduceOp::kSum;  // reduce op of partial outputs from absent factors
  PartialAcceptance accept = PartialAcceptance::kNone;
  ReduceOp accepted_op = ReduceOp::kSum;  // for kSameOp

  // Prints `mk,kn->mn R(k) [sum]`.
  std::string ToString() const;
};

struct InferResult {
  std::vector<DistAttr> inputs;   // required input dist attrs (forward) / inferred (reverse)
  std::vector<DistAttr> outputs;
  bool operator==(const InferResult&) const = default;
};

// Checks that the notation fits the shapes: one letter per dim, and every letter has one
// size over all inputs ('1' dims must have size 1). Throws SpmdError(kInvalidArgument,
// "inputs[i].shape") on a mismatch.
void CheckNotationShapes(const EinsumSpec& spec, const std::vector<std::vector<int64_t>>& shapes);

// Forward inference. Assumes the inputs are valid dist attrs of the notation's ranks.
InferResult InferEinsumForward(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& inputs);

// Reverse inference from the outputs' dist attrs (their partial maps are ignored).
// Throws SpmdError(kConflict, "outputs[i].dims_mapping") when the outputs disagree.
InferResult InferEinsumReverse(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& outputs);

}  // namespace spmd
