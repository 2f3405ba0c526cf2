#include "checker/input_values.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace spmd::checker {

reference::Tensor MakeInputValues(const Shape& shape, InputValues values, std::mt19937_64& rng) {
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto randint = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  reference::Tensor t;
  t.shape = shape;
  const int64_t n = reference::NumElements(shape);
  t.data.resize(static_cast<size_t>(n));
  // Element k takes the rank[k]-th of n evenly spaced slots, jittered within its slot.
  std::vector<int64_t> rank(static_cast<size_t>(n));
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), rng);
  const double step = n > 0 ? 1.0 / static_cast<double>(n) : 1.0;
  for (int64_t k = 0; k < n; ++k) {
    const double u = (static_cast<double>(rank[k]) + 0.5 + uniform(-0.25, 0.25)) * step;  // (0, 1)
    double& v = t.data[static_cast<size_t>(k)];
    switch (values.kind) {
      case ValueKind::kReal: v = -2.0 + 4.0 * u; break;
      case ValueKind::kPositive:
      case ValueKind::kBoxes: v = 0.1 + 1.9 * u; break;
      case ValueKind::kUnit: v = -0.9 + 1.8 * u; break;
      case ValueKind::kProbability: v = 0.05 + 0.9 * u; break;
      case ValueKind::kAboveOne: v = 1.1 + 1.9 * u; break;
      case ValueKind::kNonZero: v = (randint(0, 1) ? 1.0 : -1.0) * (0.5 + 1.5 * u); break;
      case ValueKind::kBool: v = uniform(0.0, 1.0) < values.ones ? 1.0 : 0.0; break;
      case ValueKind::kNearOne: {
        // |ln|v|| in (0.01, 0.06): a product of n values has |ln| ~ 0.04 sqrt(n), so it
        // neither underflows nor hides under a tolerance, and no factor is 1 (a product
        // missing one factor, or one rank's share, differs by at least 1%).
        const double magnitude = std::exp((randint(0, 1) ? 1.0 : -1.0) * (0.01 + 0.05 * u));
        v = (randint(0, 1) ? 1.0 : -1.0) * magnitude;
        break;
      }
      case ValueKind::kIndex:
        v = static_cast<double>(randint(0, std::max<int64_t>(values.bound, 1) - 1));
        break;
      case ValueKind::kCounts: v = static_cast<double>(randint(0, std::max<int64_t>(values.bound, 0))); break;
      case ValueKind::kSmallInt: {
        const int64_t b = std::max<int64_t>(values.bound, 0);
        v = static_cast<double>(randint(-b, b));
        break;
      }
    }
  }
  if (values.kind == ValueKind::kIndex && values.hit_end > values.hit_begin && n > 0) {
    t.data[static_cast<size_t>(randint(0, n - 1))] =
        static_cast<double>(randint(values.hit_begin, values.hit_end - 1));
  }
  ArrangeInputValues(values, shape, t.data);
  if (values.kind == ValueKind::kBool) t.dtype = DType::kBool;
  if (IsIntegerKind(values.kind)) t.dtype = DType::kInt64;
  return t;
}

}  // namespace spmd::checker
