// Small helpers the op declarations share to write notations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/engine/op_decl.h"
#include "rules/engine/shape_util.h"

namespace spmd::notation {

// Returns `n` letters starting at `first`: Letters(3) == "abc".
std::string Letters(int n, char first = 'a');

// Builds a spec from letter notations, the way declarations write them: `1` is a broadcast
// dim, each other distinct letter one factor, numbered in order of first appearance over
// `inputs` then `outputs` (so Letters(rank) as input 0 gives dim d factor d). Factors are
// unsized (bound to the input shapes later); `forced` lists letters forced replicated.
// Factors whose size the inputs do not give (split pieces, concat, tile) are added to the
// result with EinsumSpec::AddFactor(size).
EinsumSpec FromLetters(const std::vector<std::string>& inputs,
                       const std::vector<std::string>& outputs, const std::string& forced = "");

// Axis normalisation and broadcasting are shared with the references and kernels.
using shape::BroadcastShapes;
using shape::NormalizeAxes;
using shape::NormalizeAxis;
using shape::NormalizeAxisOrScalar;

// Broadcasting notation for elementwise ops (SEMANTICS.md §4): right-aligned letters
// from the left of the longest shape; a size-1 dim is `1` where the output's dim is larger
// (it broadcasts), an ordinary factor where every operand has 1 (it may stay sharded). Throws
// SpmdError(kInvalidArgument, "inputs[i].shape") for shapes that do not broadcast.
EinsumSpec Elementwise(const std::vector<Shape>& shapes);
// The letters of Elementwise: one string per input, then the output's.
std::vector<std::string> ElementwiseLetters(const std::vector<Shape>& shapes);

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
