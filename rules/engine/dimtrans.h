// The DimTrans engine (SEMANTICS.md §6): each output dim of a shape op is a transform of
// input dims, and the rule follows which input dim's sharding each output dim inherits.
//
// Worked example: reshape [4, 6] -> [4, 2, 3] gives
//   out0 = InputDim(0), out1 = Split(InputDim(1), [2, 3], 0), out2 = Split(.., 1).
// With x sharded [S(0), S(1)] on mesh 2x2: out0 keeps axis 0; out1 is piece 0 of dim 1,
// size 2 divisible by 2, so it keeps axis 1; out2 takes nothing. out = [[0],[1],[]].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rules/engine/einsum.h"

namespace spmd {

// A frozen, self-normalising value (DTensor's view ops; not Paddle's mutable tree).
class DimTrans {
 public:
  enum class Kind { kInputDim, kFlatten, kSplit, kSingleton };

  static DimTrans InputDim(int dim);
  static DimTrans Singleton();
  // Flatten of nothing is Singleton; of one transform is that transform.
  static DimTrans Flatten(std::vector<DimTrans> parts);
  // Split of `whole` into pieces of `shape`, piece `piece`. One piece is `whole` itself;
  // a piece of size 1 is Singleton.
  static DimTrans Split(DimTrans whole, std::vector<int64_t> shape, int piece);

  Kind kind() const { return kind_; }
  int input_dim() const { return input_dim_; }
  const std::vector<DimTrans>& parts() const { return parts_; }  // Flatten: parts; Split: {whole}
  const std::vector<int64_t>& split_shape() const { return split_shape_; }
  int piece() const { return piece_; }

  // Prints `Split(Flatten(InputDim(0), InputDim(1)), [2, 12], 0)`.
  std::string ToString() const;
  bool operator==(const DimTrans&) const = default;

 private:
  Kind kind_ = Kind::kSingleton;
  int input_dim_ = -1;
  std::vector<DimTrans> parts_;
  std::vector<int64_t> split_shape_;
  int piece_ = 0;
};

// A shape op as a value: the input shape and one transform per output dim.
struct DimTransSpec {
  std::vector<int64_t> input_shape;
  std::vector<int64_t> output_shape;
  std::vector<DimTrans> outputs;
};

// Returns the transforms of reshape(src -> tgt) by the two-pointer walk of §6.1.
// Assumes both shapes have the same number of elements, none of them 0.
std::vector<DimTrans> ReshapeTransforms(const std::vector<int64_t>& src,
                                        const std::vector<int64_t>& tgt);

// Forward: the required input (lost shardings removed, flattened groups moved to the
// leading dim where that divides evenly) and the output. Every partial axis is kept.
InferResult InferDimTransForward(const DimTransSpec& spec, const Mesh& mesh,
                                 const DistAttr& input);

// Reverse: the forward rule on the reverse transform (output -> input shape), then the
// forward rule from the input found, so forward and reverse agree (D4).
InferResult InferDimTransReverse(const DimTransSpec& spec, const Mesh& mesh,
                                 const DistAttr& output);

}  // namespace spmd
