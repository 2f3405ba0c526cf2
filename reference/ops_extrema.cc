// The extrema family (rules/ops/extrema.cc; docs/OPS.md "Reductions"): amax and amin are
// max and min in value (they differ in the gradient only), so their references are max's
// and min's; argmin is written here from its definition, the first index of the smallest
// value along the axis (or the flattened x). cummax and cummin are written from their
// definition: the running extreme along the axis and the index where it was found (ties
// take the later index; the first NaN stays, with its index).
#include <cmath>
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

namespace {

// `beyond(v, best)`: v replaces the running extreme (v at least as far out).
template <typename Beyond>
Tensors CumExtreme(const Tensors& inputs, const Attrs& attrs, const char* name, Beyond beyond) {
  const plan::CumExtremePlan p = plan::PlanCumExtreme(plan::ShapesOf(inputs), attrs, name);
  const Tensor& x = inputs[0];
  internal::AxisView view;
  if (p.axis >= 0) view = internal::ViewAlong(x.shape, p.axis);
  // The values are x's own elements: an int64 or bool x keeps its dtype.
  const bool exact = x.dtype == DType::kInt64 || x.dtype == DType::kBool;
  Tensor out = internal::Zeros(p.out_shape, exact ? x.dtype : DType::kFloat64);
  Tensor indices = internal::Zeros(p.out_shape, DType::kInt64);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double best = 0.0;
      int64_t at = 0;
      for (int64_t a = 0; a < view.len; ++a) {
        const double v = x.data[view.At(o, a, i)];
        if (a == 0 || (!std::isnan(best) && (std::isnan(v) || beyond(v, best)))) {
          best = v;
          at = a;
        }
        out.data[view.At(o, a, i)] = best;
        indices.data[view.At(o, a, i)] = static_cast<double>(at);
      }
    }
  }
  return {out, indices};
}

}  // namespace

Tensors cummax(const Tensors& inputs, const Attrs& attrs) {
  return CumExtreme(inputs, attrs, "cummax", [](double v, double best) { return v >= best; });
}
Tensors cummin(const Tensors& inputs, const Attrs& attrs) {
  return CumExtreme(inputs, attrs, "cummin", [](double v, double best) { return v <= best; });
}

}  // namespace spmd::reference::ops
