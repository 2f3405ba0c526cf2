// The plans of the ops whose output length depends on x's values (docs/OPS.md "Outputs sized
// by values"): nonzero, unique. Written once for their rules (rules/ops/selection.cc), float64
// references (reference/ops_selection.cc), CPU kernels (kernels/cpu/selection.cc) and CUDA
// entries (host-staged, kernels/cuda/staged.cc): attr reads, validation (error type and field)
// and the output shapes, with kDataDependentSize at the dims only the run decides (the
// count of nonzero elements, the number of distinct values; SEMANTICS.md §3 "Data-dependent
// dims"). Header-only; no value arithmetic.
//
// Example: nonzero x [3, 4] -> out [?, 2] int64; unique x [3, 4] with return_inverse ->
// out [?], indices [] (unset), inverse [12], counts [] (unset); with axis [1] as well ->
// out [3, ?], inverse [4].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/einsum.h"
#include "rules/engine/shape_util.h"

namespace spmd::selection_plan {

using Dims = std::vector<int64_t>;

// The size a declaration gives a dim that only the run decides.
inline constexpr int64_t kDataDependent = EinsumSpec::kDataDependentSize;

inline int64_t Numel(const Dims& x) {
  int64_t n = 1;
  for (int64_t s : x) n *= s;
  return n;
}

// ---- nonzero ----

struct NonzeroPlan {
  int64_t rank = 0;   // x's rank: out's second dim
  int64_t numel = 0;  // x's elements: the bound of out's first dim
  Dims out;           // [kDataDependent, rank]
};

// x of rank >= 1 (Paddle refuses a 0-d condition): InvalidArgument ("inputs[0].shape").
inline NonzeroPlan PlanNonzero(const Dims& x) {
  if (x.empty()) ThrowInvalid(shape::InputField(0, "shape"), "nonzero needs x of rank >= 1 (a 0-d x, as Paddle)");
  NonzeroPlan p;
  p.rank = static_cast<int64_t>(x.size());
  p.numel = Numel(x);
  p.out = {kDataDependent, p.rank};
  return p;
}

// ---- unique ----

// x is read as `slices` slices of `outer` x `inner` elements: slice i's elements, in row-major
// order of the slice, are x[o * slices * inner + i * inner + j] for o < outer, j < inner.
// Flattened (axis []): every element is a slice (outer = inner = 1, slices = numel). Along
// axis a: slices = x.shape[a], outer the product of the dims before a, inner of those after.
// Slices are one when every element is (equal, or both NaN; -0 and 0 equal) and sorted
// lexicographically, element by element, NaN above every number.
struct UniquePlan {
  int64_t numel = 0;   // x's elements (a 0-d x is one)
  int64_t axis = -1;   // the normalised axis; -1: flattened
  int64_t outer = 1;
  int64_t slices = 0;  // the length of inverse
  int64_t inner = 1;
  bool return_index = false;
  bool return_inverse = false;
  bool return_counts = false;
  // out [count] (flattened) or x's shape with dim axis = count, indices [count] or unset [],
  // inverse [slices] or unset [], counts [count] or unset []; count = kDataDependent.
  std::vector<Dims> outputs;
};

// axis: [] (x flattened) or one axis in [-rank, rank) (negative counts from the end); two or
// more axes, or one out of range (a 0-d x has none), InvalidArgument ("attrs.axis"). dtype
// "int64" only (the index type, as argmax): InvalidArgument ("attrs.dtype").
inline UniquePlan PlanUnique(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  const auto rank = static_cast<int64_t>(x.size());
  if (axis.size() > 1) {
    ThrowInvalid("attrs.axis", "unique takes at most one axis, got " + std::to_string(axis.size()));
  }
  const std::string& dtype = attrs.GetString("dtype");
  if (dtype != "int64") ThrowInvalid("attrs.dtype", "unique outputs int64 indices, got '" + dtype + "'");
  UniquePlan p;
  p.numel = Numel(x);
  p.return_index = attrs.GetBool("return_index");
  p.return_inverse = attrs.GetBool("return_inverse");
  p.return_counts = attrs.GetBool("return_counts");
  Dims out{kDataDependent};
  p.slices = p.numel;
  if (!axis.empty()) {
    p.axis = shape::NormalizeAxis(axis[0], rank, "attrs.axis");
    const auto a = static_cast<size_t>(p.axis);
    p.slices = x[a];
    for (size_t d = 0; d < a; ++d) p.outer *= x[d];
    for (size_t d = a + 1; d < x.size(); ++d) p.inner *= x[d];
    out = x;
    out[a] = kDataDependent;
  }
  p.outputs = {out,
               p.return_index ? Dims{kDataDependent} : Dims{},
               p.return_inverse ? Dims{p.slices} : Dims{},
               p.return_counts ? Dims{kDataDependent} : Dims{}};
  return p;
}

}  // namespace spmd::selection_plan
