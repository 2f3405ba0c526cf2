// Ops whose output length depends on x's values (docs/OPS.md "Outputs sized by values"):
// nonzero, unique. Any dtype (float32, float64, int64, bool; 2-byte floats widened by
// RunCpuKernel): values are compared in their own type. nonzero scans x once; unique sorts
// the slices' positions along the axis (flattened: the elements') by (slice, position), a
// slice ordered by its first element that differs, NaN above every number, so the positions
// of one slice are adjacent and its first occurrence leads: the references' answer exactly.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/ops/selection_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::CheckArity;
using internal::NewOutput;
using internal::SortsBefore;

// One value for unique: equal, or both NaN.
template <typename T>
bool Same(T a, T b) {
  return a == b || (IsNan(a) && IsNan(b));
}

}  // namespace

Tensors nonzero(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const selection_plan::NonzeroPlan plan = selection_plan::PlanNonzero(x.shape());
  std::vector<int64_t> hits;  // flat positions of the nonzero elements
  internal::VisitData(x, [&](const auto* src) {
    for (int64_t i = 0; i < plan.numel; ++i) {
      if (src[i] != 0) hits.push_back(i);  // NaN != 0
    }
  });
  Tensor out = NewOutput({static_cast<int64_t>(hits.size()), plan.rank}, DType::kInt64);
  int64_t* dst = out.data<int64_t>();
  const Shape& shape = x.shape();
  for (size_t k = 0; k < hits.size(); ++k) {
    int64_t rest = hits[k];
    for (int64_t d = plan.rank - 1; d >= 0; --d) {
      dst[static_cast<int64_t>(k) * plan.rank + d] = rest % shape[d];
      rest /= shape[d];
    }
  }
  return {std::move(out)};
}

Tensors unique(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const selection_plan::UniquePlan plan = selection_plan::PlanUnique(x.shape(), attrs);
  const int64_t n = plan.slices, inner = plan.inner, stride = plan.slices * plan.inner;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::vector<int64_t> group_of(static_cast<size_t>(n));  // slice -> its index in out
  std::vector<int64_t> firsts;                            // per distinct slice, its first position
  std::vector<int64_t> sizes;                             // per distinct slice, how often
  internal::VisitData(x, [&](const auto* src) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    // Slice a's e-th element (row-major in the slice), e = o * inner + j.
    const auto at = [&](int64_t a, int64_t o, int64_t j) { return src[o * stride + a * inner + j]; };
    // The first element where slices a and b differ, or -1 when none does.
    const auto differ = [&](int64_t a, int64_t b) -> std::pair<int64_t, int64_t> {
      for (int64_t o = 0; o < plan.outer; ++o) {
        for (int64_t j = 0; j < inner; ++j) {
          if (!Same(at(a, o, j), at(b, o, j))) return {o, j};
        }
      }
      return {-1, -1};
    };
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const auto [o, j] = differ(a, b);
      if (o < 0) return a < b;
      return SortsBefore<T>(at(a, o, j), a, at(b, o, j), b, false);
    });
    for (int64_t k = 0; k < n; ++k) {
      const int64_t slice = order[static_cast<size_t>(k)];
      if (k == 0 || differ(slice, firsts.back()).first >= 0) {
        firsts.push_back(slice);
        sizes.push_back(0);
      }
      ++sizes.back();
      group_of[static_cast<size_t>(slice)] = static_cast<int64_t>(firsts.size()) - 1;
    }
  });
  const auto count = static_cast<int64_t>(firsts.size());
  Shape out_shape{count};
  if (plan.axis >= 0) {
    out_shape = x.shape();
    out_shape[static_cast<size_t>(plan.axis)] = count;
  }
  Tensor out = NewOutput(out_shape, x.dtype());
  internal::VisitData(x, [&](const auto* src) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    T* dst = out.data<T>();
    for (int64_t o = 0; o < plan.outer; ++o) {
      for (int64_t k = 0; k < count; ++k) {
        std::copy_n(src + o * stride + firsts[static_cast<size_t>(k)] * inner, inner,
                    dst + (o * count + k) * inner);
      }
    }
  });
  const auto int64s = [](const Shape& shape, const std::vector<int64_t>& values) {
    Tensor t = NewOutput(shape, DType::kInt64);
    std::copy(values.begin(), values.end(), t.data<int64_t>());
    return t;
  };
  const Tensor unset = NewOutput({}, DType::kInt64, /*zero=*/true);
  Tensors result;
  result.push_back(std::move(out));
  result.push_back(plan.return_index ? int64s({count}, firsts) : unset);
  result.push_back(plan.return_inverse ? int64s({n}, group_of) : unset);
  result.push_back(plan.return_counts ? int64s({count}, sizes) : unset);
  return result;
}

}  // namespace spmd::kernels::cpu
