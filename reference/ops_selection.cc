// Ops whose output length depends on x's values (docs/OPS.md "Outputs sized by values"):
// nonzero, unique. Plain loops over the flattened x, written for obviousness rather than
// speed: nonzero tests each element and spells out its coordinates; unique compares every
// element with every other (NaNs one value, -0 and 0 one value) and orders the first
// occurrences by repeated selection of the least remaining one.
#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/selection_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;

// Whether a and b are one value for unique: numerically equal, or both NaN.
bool SameValue(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Whether a comes strictly before b in ascending order, NaN above every number.
bool Below(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

}  // namespace

// out[k] = the coordinates (row-major) of the k-th nonzero element of x, NaN counting as
// nonzero.
Tensors nonzero(const Tensors& inputs, const Attrs&) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const selection_plan::NonzeroPlan plan = selection_plan::PlanNonzero(x.shape);
  std::vector<double> rows;
  for (int64_t flat = 0; flat < plan.numel; ++flat) {
    const double v = x.data[static_cast<size_t>(flat)];
    if (v == 0.0) continue;  // NaN != 0: kept
    std::vector<double> coord(static_cast<size_t>(plan.rank));
    int64_t rest = flat;
    for (int64_t d = plan.rank - 1; d >= 0; --d) {
      const int64_t size = x.shape[static_cast<size_t>(d)];
      coord[static_cast<size_t>(d)] = static_cast<double>(rest % size);
      rest /= size;
    }
    rows.insert(rows.end(), coord.begin(), coord.end());
  }
  const int64_t count = plan.rank == 0 ? 0 : static_cast<int64_t>(rows.size()) / plan.rank;
  Tensor out = internal::Zeros({count, plan.rank}, DType::kInt64);
  out.data = rows;
  return {out};
}

// The sorted distinct values of the flattened x, where each first occurs, the position in
// out of every element, and how often each occurs; unset outputs are 0-d zeros.
Tensors unique(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const selection_plan::UniquePlan plan = selection_plan::PlanUnique(x.shape, attrs);
  const int64_t n = plan.numel;
  // The first occurrence of every distinct value, in x's order.
  std::vector<int64_t> firsts;
  for (int64_t i = 0; i < n; ++i) {
    bool seen = false;
    for (int64_t j = 0; j < i && !seen; ++j) seen = SameValue(x.data[static_cast<size_t>(j)], x.data[static_cast<size_t>(i)]);
    if (!seen) firsts.push_back(i);
  }
  // Ordered by value: repeatedly the least value not taken yet.
  std::vector<int64_t> order;
  std::vector<bool> taken(firsts.size(), false);
  for (size_t step = 0; step < firsts.size(); ++step) {
    int64_t best = -1;
    for (size_t k = 0; k < firsts.size(); ++k) {
      if (taken[k]) continue;
      if (best < 0 || Below(x.data[static_cast<size_t>(firsts[k])], x.data[static_cast<size_t>(firsts[static_cast<size_t>(best)])])) {
        best = static_cast<int64_t>(k);
      }
    }
    taken[static_cast<size_t>(best)] = true;
    order.push_back(firsts[static_cast<size_t>(best)]);
  }
  const auto count = static_cast<int64_t>(order.size());
  Tensor out = internal::Zeros({count}, x.dtype);
  Tensor indices = internal::Zeros({count}, DType::kInt64);
  Tensor counts = internal::Zeros({count}, DType::kInt64);
  Tensor inverse = internal::Zeros({n}, DType::kInt64);
  for (int64_t k = 0; k < count; ++k) {
    const double value = x.data[static_cast<size_t>(order[static_cast<size_t>(k)])];
    out.data[static_cast<size_t>(k)] = value;
    indices.data[static_cast<size_t>(k)] = static_cast<double>(order[static_cast<size_t>(k)]);
    for (int64_t i = 0; i < n; ++i) {
      if (!SameValue(x.data[static_cast<size_t>(i)], value)) continue;
      counts.data[static_cast<size_t>(k)] += 1;
      inverse.data[static_cast<size_t>(i)] = static_cast<double>(k);
    }
  }
  const Tensor unset = internal::Zeros({}, DType::kInt64);
  return {out, plan.return_index ? indices : unset, plan.return_inverse ? inverse : unset,
          plan.return_counts ? counts : unset};
}

}  // namespace spmd::reference::ops
