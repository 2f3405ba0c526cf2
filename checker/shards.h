// A tensor held on a simulated mesh: one local tensor per rank, and the two ways between
// a global value and its shards (SEMANTICS.md §2.1). The gradient check keeps every value
// of a backward graph in this form, so that a call's output (partial included) is what
// the next call reads, as on a real mesh.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/tensor.h"
#include "rules/model/dist_attr.h"
#include "rules/model/layout.h"
#include "rules/model/mesh.h"

namespace spmd::checker {

using reference::Shape;

struct ShardedTensor {
  Shape global_shape;
  DistAttr attr;
  DType dtype = DType::kFloat64;
  std::vector<reference::Tensor> locals;  // one per rank, in row-major coordinate order
};

// Every coordinate of `mesh`, in row-major order (the order of ShardedTensor::locals and
// of mesh.process_ids()).
std::vector<std::vector<int64_t>> MeshCoordinates(const Mesh& mesh);

// Returns the rows [ranges[d]) of `t`.
reference::Tensor SliceTensor(const reference::Tensor& t, const std::vector<Range>& ranges);

// Gives each rank its shard of `global` under `attr`: the layout's box, of the addend of
// its partial slot (rules/engine/partial_split.h: unequal, sign-varying addends, so a dropped or
// doubled share shows; 0/1 addends for a bool tensor).
ShardedTensor ShardTensor(const reference::Tensor& global, const DistAttr& attr, const Mesh& mesh,
                          std::mt19937_64& rng);

// Assembles the global value: checks every rank's local shape against the layout and
// every replica against its coordinate-0 peer (within `relative` of the larger magnitude
// plus `absolute`), places the shards and reduces the partial axes (nested, in the order
// ShardTensor splits them). Returns false and sets *error (one readable line) when a
// local shape, a replica or the coverage is wrong.
bool AssembleTensor(const ShardedTensor& t, const Mesh& mesh, double relative, double absolute,
                    reference::Tensor* global, std::string* error);

// "[1,2,3]": an index or a shape in messages.
std::string IndexText(const std::vector<int64_t>& index);
// A double with all 17 significant digits, for counterexamples.
std::string Number(double v);

}  // namespace spmd::checker
