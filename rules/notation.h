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
// it is outside [-rank, rank).
int NormalizeAxis(int64_t axis, int rank, const std::string& field);
// As NormalizeAxis, but a 0-d tensor accepts 0 and -1 (Paddle's scalar case) and gets -1:
// the op then has no dim to act on.
int NormalizeAxisOrScalar(int64_t axis, int rank, const std::string& field);
// Normalises a list of axes, rejecting duplicates; on a 0-d tensor 0 and -1 are accepted
// and dropped.
std::vector<int> NormalizeAxes(const std::vector<int64_t>& axes, int rank,
                               const std::string& field);

// Broadcasting notation for elementwise ops (SEMANTICS.md §4): right-aligned letters
// from the left of the longest shape; a size-1 dim is `1`. Throws
// SpmdError(kInvalidArgument, "inputs[i].shape") for shapes that do not broadcast.
EinsumSpec Elementwise(const std::vector<Shape>& shapes);

// Returns the numpy broadcast of `shapes`, or throws as Elementwise does.
Shape BroadcastShapes(const std::vector<Shape>& shapes);

// Examples from letter patterns: each distinct letter takes the palette's next size in
// order of first appearance; '1' is size 1. Signature({{"mk", "kn"}}, p) with p = {4, 5, 6}
// gives shapes [4, 5] and [5, 6].
struct Signature {
  std::vector<std::string> patterns;
  Attrs attrs;
};
ExampleBuilder FromSignatures(std::vector<Signature> signatures);
std::vector<Shape> ShapesOf(const std::vector<std::string>& patterns, const SizePalette& palette);

// Attrs from a list: MakeAttrs({{"axis", Ints{1}}, {"keep_dim", true}}).
using Ints = std::vector<int64_t>;
Attrs MakeAttrs(std::initializer_list<std::pair<std::string, AttrValue>> values);

}  // namespace spmd::notation
