// Sorting ops (docs/OPS.md "Paddle's other registered ops"): argsort, topk. Any dtype:
// values are compared in their own type and out keeps x's dtype; indices are int64. The
// order is total (NaN above every number, ties by index), so std::sort and
// std::partial_sort give the references' answer exactly.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/ops/sort_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::CheckArity;
using internal::NewOutput;
using internal::SortsBefore;

// Per line of x along `axis`, the first `k` positions in sorted order into out (x's
// dtype) and indices (int64).
Tensors SortAlong(const Tensor& x, int64_t axis, int64_t k, bool descending) {
  const internal::AxisView v = internal::ViewAlong(x.shape(), axis);
  Shape out_shape = x.shape();
  if (!out_shape.empty()) out_shape[axis] = k;
  Tensor out = NewOutput(out_shape, x.dtype());
  Tensor indices = NewOutput(out_shape, DType::kInt64);
  if (out.numel() == 0) return {std::move(out), std::move(indices)};
  internal::VisitData(x, [&](const auto* src) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    T* dst = out.data<T>();
    int64_t* idx = indices.data<int64_t>();
    std::vector<int64_t> order(static_cast<size_t>(v.len));
    std::vector<T> line(static_cast<size_t>(v.len));
    const auto less = [&](int64_t a, int64_t b) { return SortsBefore(line[a], a, line[b], b, descending); };
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        for (int64_t a = 0; a < v.len; ++a) line[a] = src[(o * v.len + a) * v.inner + i];
        std::iota(order.begin(), order.end(), int64_t{0});
        if (k == v.len) {
          std::sort(order.begin(), order.end(), less);
        } else {
          std::partial_sort(order.begin(), order.begin() + k, order.end(), less);
        }
        for (int64_t j = 0; j < k; ++j) {
          const int64_t at = (o * k + j) * v.inner + i;
          dst[at] = line[order[j]];
          idx[at] = order[j];
        }
      }
    }
  });
  return {std::move(out), std::move(indices)};
}

}  // namespace

Tensors argsort(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const sort_plan::SortPlan plan = sort_plan::PlanArgsort(inputs[0].shape(), attrs);
  return SortAlong(inputs[0], plan.axis, plan.k, plan.descending);
}

Tensors topk(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const sort_plan::SortPlan plan = sort_plan::PlanTopk(inputs[0].shape(), attrs);
  return SortAlong(inputs[0], plan.axis, plan.k, plan.descending);
}

}  // namespace spmd::kernels::cpu
