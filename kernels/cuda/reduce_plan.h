// How the CUDA reductions lay x out and split the work: plain C++ (no CUDA header), tested
// on the CPU (kernels/cuda/reduce_plan_test.cc: a host fold that follows the layout gives
// what the CPU kernels give; the launch splits cover every element once).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::kernels::cuda {

// Which dims a reduction removes: rules/ops/reduction_plan.h (checked and planned once for the
// references and the kernels).
using plan::PlanReduceShape;
using plan::ReduceShape;

// x seen as [outer, len, inner] (row-major), after permuting it by `perm` when that is not
// empty (the kept dims first, then the reduced ones): out[o, i] folds x[o, a, i] over a.
// The CPU kernel's arrangement: size-1 dims dropped, neighbours with the same flag merged,
// one block of reduced dims used in place, several moved last. An empty x gives len 0
// (every output the identity) and no permutation.
struct ReduceLayout {
  int64_t outer = 1, len = 1, inner = 1;
  std::vector<int64_t> perm;
};
ReduceLayout ArrangeReduce(const Shape& x, const std::vector<bool>& reduced);

// How the kernels split one layout:
// - inner == 1 (rows): a warp per row (warp_rows) when the rows are short, else one block
//   per (row, piece);
// - inner > 1 (columns): a thread per (outer, piece, inner) folding its piece of the len
//   dim in order.
// Each output's len is cut into `splits` pieces of `chunk` elements (the last may be
// shorter, none empty); with splits > 1 the pieces' partial results go to a scratch
// [outer, splits, inner] that a second kernel folds in piece order, so the result does
// not depend on timing (no atomics).
struct ReduceLaunch {
  bool rows = true;
  bool warp_rows = false;
  int64_t splits = 1;
  int64_t chunk = 0;
};
ReduceLaunch PlanReduceLaunch(const ReduceLayout& layout);

// The largest `splits` PlanReduceLaunch gives.
inline constexpr int64_t kMaxReduceSplits = 1024;

}  // namespace spmd::kernels::cuda
