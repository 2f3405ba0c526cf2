// CPU kernels of the extrema family (rules/ops/extrema.cc): amax and amin run max's and
// min's kernels (the same values); argmin scans for the first index of the smallest
// value, compared in x's own dtype (a NaN is skipped unless it is at index 0, as argmax).
// cummax and cummin scan along the axis in x's own dtype: the running extreme (values in
// x's dtype) and its int64 index; ties take the later index, the first NaN stays.
#include <cmath>
#include <memory>
#include <type_traits>
#include <utility>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::kernels::cpu {

Tensors amax(const TensorArgs& inputs, const Attrs& attrs) { return max(inputs, attrs); }
Tensors amin(const TensorArgs& inputs, const Attrs& attrs) { return min(inputs, attrs); }

Tensors argmin(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::ArgmaxPlan p = plan::PlanArgmax(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  internal::AxisView view;
  if (p.flatten) {
    view.len = x.numel();
  } else if (p.axis >= 0) {
    view = internal::ViewAlong(x.shape(), p.axis);
  }
  Tensor out = internal::NewOutput(p.out_shape, DType::kInt64);
  int64_t* o = out.data<int64_t>();
  internal::VisitData(x, [&](const auto* data) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    std::unique_ptr<V[]> best_value(new V[static_cast<size_t>(view.inner > 0 ? view.inner : 1)]);
    for (int64_t r = 0; r < view.outer; ++r) {
      int64_t* best = o + r * view.inner;
      const V* first = data + r * view.len * view.inner;
      for (int64_t i = 0; i < view.inner; ++i) {
        best[i] = 0;
        best_value[i] = first[i];
      }
      for (int64_t a = 1; a < view.len; ++a) {
        const V* row = first + a * view.inner;
        for (int64_t i = 0; i < view.inner; ++i) {
          if (row[i] < best_value[i]) {
            best[i] = a;
            best_value[i] = row[i];
          }
        }
      }
    }
  });
  return TensorList(std::move(out));
}

namespace {

// `beyond(v, best)`: v replaces the running extreme.
template <typename Beyond>
Tensors CumExtreme(const TensorArgs& inputs, const Attrs& attrs, const char* name, Beyond beyond) {
  const plan::CumExtremePlan p = plan::PlanCumExtreme(plan::ShapesOf(inputs), attrs, name);
  const Tensor& x = inputs[0];
  internal::AxisView view;
  if (p.axis >= 0) view = internal::ViewAlong(x.shape(), p.axis);
  Tensor out = internal::NewOutput(p.out_shape, x.dtype());
  Tensor indices = internal::NewOutput(p.out_shape, DType::kInt64);
  int64_t* idx = indices.data<int64_t>();
  internal::VisitData(x, [&](const auto* data) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    auto is_nan = [](V v) {
      if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
      return false;
    };
    V* o = out.data<V>();
    for (int64_t r = 0; r < view.outer; ++r) {
      for (int64_t i = 0; i < view.inner; ++i) {
        V best{};
        int64_t at = 0;
        for (int64_t a = 0; a < view.len; ++a) {
          const int64_t k = (r * view.len + a) * view.inner + i;
          const V v = data[k];
          if (a == 0 || (!is_nan(best) && (is_nan(v) || beyond(v, best)))) {
            best = v;
            at = a;
          }
          o[k] = best;
          idx[k] = at;
        }
      }
    }
  });
  return TensorList(std::move(out), std::move(indices));
}

}  // namespace

Tensors cummax(const TensorArgs& inputs, const Attrs& attrs) {
  return CumExtreme(inputs, attrs, "cummax", [](auto v, auto best) { return v >= best; });
}
Tensors cummin(const TensorArgs& inputs, const Attrs& attrs) {
  return CumExtreme(inputs, attrs, "cummin", [](auto v, auto best) { return v <= best; });
}

}  // namespace spmd::kernels::cpu
