// Ops whose output length depends on x's values (docs/OPS.md "Outputs sized by values"):
// nonzero, unique. Plain loops over the flattened x, written for obviousness rather than
// speed: nonzero tests each element and spells out its coordinates; unique gathers x's slices
// (one element each when flattened) by decoding every element's coordinates, compares every
// slice with every other element by element (NaNs one value, -0 and 0 one value) and orders
// the first occurrences by repeated selection of the least remaining one.
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

// The sorted distinct values of the flattened x (or x's distinct slices along the axis),
// where each first occurs, the position in out of every element (slice), and how often each
// occurs; unset outputs are 0-d zeros.
Tensors unique(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const selection_plan::UniquePlan plan = selection_plan::PlanUnique(x.shape, attrs);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  // Each element's slice: its coordinate along the axis (flattened: its flat position). Every
  // slice gathers its elements in x's row-major order, which is the slice's own.
  std::vector<std::vector<double>> slices(static_cast<size_t>(plan.slices));
  for (int64_t flat = 0; flat < plan.numel; ++flat) {
    int64_t slice = flat;
    if (plan.axis >= 0) {
      int64_t rest = flat;
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t size = x.shape[static_cast<size_t>(d)];
        if (d == plan.axis) slice = rest % size;
        rest /= size;
      }
    }
    slices[static_cast<size_t>(slice)].push_back(x.data[static_cast<size_t>(flat)]);
  }
  const auto same = [&](int64_t i, int64_t j) {
    const std::vector<double>& a = slices[static_cast<size_t>(i)];
    const std::vector<double>& b = slices[static_cast<size_t>(j)];
    for (size_t e = 0; e < a.size(); ++e) {
      if (!SameValue(a[e], b[e])) return false;
    }
    return true;
  };
  // Lexicographic: the first element where they differ decides.
  const auto below = [&](int64_t i, int64_t j) {
    const std::vector<double>& a = slices[static_cast<size_t>(i)];
    const std::vector<double>& b = slices[static_cast<size_t>(j)];
    for (size_t e = 0; e < a.size(); ++e) {
      if (!SameValue(a[e], b[e])) return Below(a[e], b[e]);
    }
    return false;
  };
  // The first occurrence of every distinct slice, in x's order.
  std::vector<int64_t> firsts;
  for (int64_t i = 0; i < plan.slices; ++i) {
    bool seen = false;
    for (int64_t j = 0; j < i && !seen; ++j) seen = same(j, i);
    if (!seen) firsts.push_back(i);
  }
  // Ordered: repeatedly the least slice not taken yet.
  std::vector<int64_t> order;
  std::vector<bool> taken(firsts.size(), false);
  for (size_t step = 0; step < firsts.size(); ++step) {
    int64_t best = -1;
    for (size_t k = 0; k < firsts.size(); ++k) {
      if (taken[k]) continue;
      if (best < 0 || below(firsts[k], firsts[static_cast<size_t>(best)])) best = static_cast<int64_t>(k);
    }
    taken[static_cast<size_t>(best)] = true;
    order.push_back(firsts[static_cast<size_t>(best)]);
  }
  const auto count = static_cast<int64_t>(order.size());
  Shape out_shape{count};
  if (plan.axis >= 0) {
    out_shape = x.shape;
    out_shape[static_cast<size_t>(plan.axis)] = count;
  }
  Tensor out = internal::Zeros(out_shape, x.dtype);
  Tensor indices = internal::Zeros({count}, DType::kInt64);
  Tensor counts = internal::Zeros({count}, DType::kInt64);
  Tensor inverse = internal::Zeros({plan.slices}, DType::kInt64);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t first = order[static_cast<size_t>(k)];
    indices.data[static_cast<size_t>(k)] = static_cast<double>(first);
    for (int64_t i = 0; i < plan.slices; ++i) {
      if (!same(i, first)) continue;
      counts.data[static_cast<size_t>(k)] += 1;
      inverse.data[static_cast<size_t>(i)] = static_cast<double>(k);
    }
  }
  // out's elements: each takes the next element of its slice, the slices' order kept.
  std::vector<size_t> next(static_cast<size_t>(count), 0);
  for (size_t flat = 0; flat < out.data.size(); ++flat) {
    int64_t k = static_cast<int64_t>(flat);
    if (plan.axis >= 0) {
      int64_t rest = static_cast<int64_t>(flat);
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t size = out_shape[static_cast<size_t>(d)];
        if (d == plan.axis) k = rest % size;
        rest /= size;
      }
    }
    const std::vector<double>& slice = slices[static_cast<size_t>(order[static_cast<size_t>(k)])];
    out.data[static_cast<size_t>(flat)] = slice[next[static_cast<size_t>(k)]++];
  }
  const Tensor unset = internal::Zeros({}, DType::kInt64);
  return {out, plan.return_index ? indices : unset, plan.return_inverse ? inverse : unset,
          plan.return_counts ? counts : unset};
}

}  // namespace spmd::reference::ops
