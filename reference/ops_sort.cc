// Sorting ops (docs/OPS.md "Paddle's other registered ops"): argsort, topk. Plain loops: per
// line along the axis, a selection sort by the order of docs/OPS.md (NaN above every
// number, ties in index order), written for obviousness rather than speed.
#include <cmath>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/sort_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;

// Whether a comes before b in ascending order (descending: the reverse), with NaN above
// every number; equal values (and two NaNs) are neither, and keep index order.
bool Before(double a, double b, bool descending) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan || b_nan) return descending ? a_nan && !b_nan : b_nan && !a_nan;
  return descending ? a > b : a < b;
}

// The positions along one line of `len` values, sorted: repeatedly the first remaining
// position whose value no other remaining value comes before.
std::vector<int64_t> SortedPositions(const std::vector<double>& line, bool descending) {
  const int64_t len = static_cast<int64_t>(line.size());
  std::vector<bool> taken(static_cast<size_t>(len), false);
  std::vector<int64_t> order;
  for (int64_t step = 0; step < len; ++step) {
    int64_t best = -1;
    for (int64_t a = 0; a < len; ++a) {
      if (taken[a]) continue;
      if (best < 0 || Before(line[a], line[best], descending)) best = a;
    }
    taken[best] = true;
    order.push_back(best);
  }
  return order;
}

// The first `k` positions of each line of x along `axis` in sorted order: out and indices
// of x's shape with the axis `k` long.
Tensors SortAlong(const Tensor& x, int64_t axis, int64_t k, bool descending) {
  const internal::AxisView v = internal::ViewAlong(x.shape, axis);
  Shape out_shape = x.shape;
  if (!out_shape.empty()) out_shape[axis] = k;
  Tensor out = internal::Zeros(out_shape, x.dtype);
  Tensor indices = internal::Zeros(out_shape, DType::kInt64);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      std::vector<double> line;
      for (int64_t a = 0; a < v.len; ++a) line.push_back(x.data[v.At(o, a, i)]);
      const std::vector<int64_t> order = SortedPositions(line, descending);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * v.inner + i;
        out.data[at] = line[order[j]];
        indices.data[at] = static_cast<double>(order[j]);
      }
    }
  }
  return {out, indices};
}

}  // namespace

// out: x sorted along axis (descending: largest first); indices: where each came from.
Tensors argsort(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const sort_plan::SortPlan plan = sort_plan::PlanArgsort(inputs[0].shape, attrs);
  return SortAlong(inputs[0], plan.axis, plan.k, plan.descending);
}

// The k largest (largest false: smallest) along axis, best first.
Tensors topk(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const sort_plan::SortPlan plan = sort_plan::PlanTopk(inputs[0].shape, attrs);
  return SortAlong(inputs[0], plan.axis, plan.k, plan.descending);
}

}  // namespace spmd::reference::ops
