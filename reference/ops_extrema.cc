// The extrema family (rules/ops/extrema.cc; docs/OPS.md "Reductions"): amax and amin are
// max and min in value (they differ in the gradient only), so their references are max's
// and min's; argmin is written here from its definition, the first index of the smallest
// value along the axis (or the flattened x).
#include <cstdint>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::reference::ops {

Tensors amax(const Tensors& inputs, const Attrs& attrs) { return max(inputs, attrs); }
Tensors amin(const Tensors& inputs, const Attrs& attrs) { return min(inputs, attrs); }

Tensors argmin(const Tensors& inputs, const Attrs& attrs) {
  const plan::ArgmaxPlan p = plan::PlanArgmax(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  internal::AxisView view;
  if (p.flatten) {
    view.len = NumElements(x.shape);
  } else if (p.axis >= 0) {
    view = internal::ViewAlong(x.shape, p.axis);
  }
  Tensor out = internal::Zeros(p.out_shape, DType::kInt64);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      int64_t best = 0;
      for (int64_t a = 1; a < view.len; ++a) {
        if (x.data[view.At(o, a, i)] < x.data[view.At(o, best, i)]) best = a;
      }
      out.data[o * view.inner + i] = static_cast<double>(best);
    }
  }
  return {out};
}

}  // namespace spmd::reference::ops
