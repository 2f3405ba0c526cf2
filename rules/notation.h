// Small helpers the op declarations share to write notations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/op_decl.h"

namespace spmd::notation {

// Returns `n` letters starting at `first`: Letters(3) == "abc".
std::string Letters(int n, char first = 'a');

// Returns fresh letter `i` (a byte >= 128): never shared with an input's letters, used for
// dims whose size changes (split pieces, concat, tile) and that are forced replicated.
char Fresh(int i);

// Returns axis + rank for a negative axis; throws SpmdError(kInvalidArgument, field) when
// it is outside [-rank, rank). `rank` 0 accepts 0 and -1 as Paddle does for 0-d tensors
// only when `allow_scalar`.
int NormalizeAxis(int64_t axis, int rank, const std::string& field);
// Normalises a list of axes, rejecting duplicates.
std::vector<int> NormalizeAxes(const std::vector<int64_t>& axes, int rank,
                               const std::string& field);

// Broadcasting notation for elementwise ops (SEMANTICS.md §4): right-aligned letters
// from the left of the longest shape; a size-1 dim is `1`. Throws
// SpmdError(kInvalidArgument, "inputs[i].shape") for shapes that do not broadcast.
EinsumSpec Elementwise(const std::vector<Shape>& shapes);

// Returns the numpy broadcast of `shapes`, or throws as Elementwise does.
Shape BroadcastShapes(const std::vector<Shape>& shapes);

}  // namespace spmd::notation
