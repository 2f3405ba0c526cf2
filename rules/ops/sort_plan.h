// argsort's and topk's plans (docs/OPS.md "Paddle's other registered ops"), written once
// for their rules (rules/ops/sort.cc), float64 references (reference/ops_sort.cc), CPU
// kernels (kernels/cpu/sort.cc) and CUDA kernels (kernels/cuda/sort.cu): the sorted axis,
// its length, how many elements are kept and in which order, with the same validation
// (error type and field) in all four. Header-only; no value arithmetic.
//
// Example: topk x [4, 6] with k 2, axis -1 -> axis 1, len 6, k 2; a 0-d x accepts axis
// 0 or -1 and k 1 (it is seen as [1]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/ops/shape_plan.h"

namespace spmd::sort_plan {

struct SortPlan {
  bool scalar = false;  // a 0-d x: seen as [1] along axis 0
  int64_t axis = 0;     // normalised (0 for a 0-d x)
  int64_t len = 1;      // x's size along axis
  int64_t k = 1;        // how many are kept: len for argsort
  bool descending = false;  // argsort's descending, topk's largest
};

inline SortPlan PlanSortAxis(const std::vector<int64_t>& x, const Attrs& attrs) {
  SortPlan p;
  p.scalar = x.empty();
  p.axis = shape_plan::NormalizeAxisOfScalarAsZero(attrs.GetInt("axis"), static_cast<int64_t>(x.size()),
                                                   "attrs.axis");
  p.len = p.scalar ? 1 : x[p.axis];
  return p;
}

inline SortPlan PlanArgsort(const std::vector<int64_t>& x, const Attrs& attrs) {
  SortPlan p = PlanSortAxis(x, attrs);
  p.k = p.len;
  p.descending = attrs.GetBool("descending");
  return p;
}

// 0 <= k <= len; a 0-d x takes k == 1.
inline SortPlan PlanTopk(const std::vector<int64_t>& x, const Attrs& attrs) {
  SortPlan p = PlanSortAxis(x, attrs);
  p.k = attrs.GetInt("k");
  if (p.scalar && p.k != 1) ThrowInvalid("attrs.k", "k must be 1 for a 0-d x, got " + std::to_string(p.k));
  if (p.k < 0 || p.k > p.len) {
    ThrowInvalid("attrs.k", "k " + std::to_string(p.k) + " outside [0, " + std::to_string(p.len) +
                                "] (the size of the sorted axis)");
  }
  p.descending = attrs.GetBool("largest");
  return p;
}

}  // namespace spmd::sort_plan
