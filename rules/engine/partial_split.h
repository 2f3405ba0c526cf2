// Addends of a partial tensor: the one way the checker and the tests turn a global value
// into the per-rank values of a partial dist attr (a value that is the reduction of the
// ranks' values over the partial mesh axes). The addends are unequal and sign-varying (or
// values that make a wrong reduce op visible), so that a rule or a collective reducing
// with the wrong op, twice, or not at all gives a different value. Header-only: the
// checker (checker/simulate.cc), the runtime properties and the planner's simulation
// test (rules/reshard/reshard_test.cc) all use it.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"

namespace spmd {

struct SplitOptions {
  bool integer = false;     // integer addends (exact in every dtype); else reals
  bool boolean = false;     // 0/1 values: max / min addends stay 0/1 (they act as any / all)
  bool avg_copies = false;  // avg: every addend holds the value (an int64 avg truncates, so a
                            // nested reduction only gives the value back when each sum divides)
};

// Returns n addends whose reduction by `op` is `v`. One addend (a random "keeper") takes
// what is left; for sum / avg the others are random in (-1.5, 1.5) (integers in [-3, 3];
// 0/1 values: 0),
// for prod random signs times (0.5, 1.5) (integers: +-1), for max (min) values below
// (above) v, for any / all 0/1 values that keep the result.
inline std::vector<double> SplitValue(double v, ReduceOp op, int64_t n, const SplitOptions& options,
                                      std::mt19937_64& rng) {
  std::vector<double> parts(static_cast<size_t>(n), v);
  if (n == 1 || (op == ReduceOp::kAvg && options.avg_copies)) return parts;
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto randint = [&](int64_t lo, int64_t hi) {
    return static_cast<double>(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
  };
  const int64_t keeper = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
  double rest = op == ReduceOp::kProd ? 1.0 : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == keeper) continue;
    double& p = parts[static_cast<size_t>(i)];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        // 0/1 values (a partial(sum) condition): the keeper holds the value, the others 0.
        p = options.boolean ? 0.0 : options.integer ? randint(-3, 3) : uniform(-1.5, 1.5);
        rest += p;
        break;
      case ReduceOp::kMax:
        if (options.boolean) {
          p = v != 0 ? randint(0, 1) : 0.0;
        } else {
          p = v - (options.integer ? randint(1, 3) : uniform(0.25, 1.5));
        }
        break;
      case ReduceOp::kMin:
        if (options.boolean) {
          p = v != 0 ? 1.0 : randint(0, 1);
        } else {
          p = v + (options.integer ? randint(1, 3) : uniform(0.25, 1.5));
        }
        break;
      case ReduceOp::kProd: {
        const double sign = randint(0, 1) != 0 ? 1.0 : -1.0;
        p = sign * (options.integer ? 1.0 : uniform(0.5, 1.5));
        rest *= p;
        break;
      }
      case ReduceOp::kAny: p = v != 0 ? randint(0, 1) : 0.0; break;
      case ReduceOp::kAll: p = v != 0 ? 1.0 : randint(0, 1); break;
    }
  }
  double& kept = parts[static_cast<size_t>(keeper)];
  switch (op) {
    case ReduceOp::kSum: kept = v - rest; break;
    case ReduceOp::kAvg: kept = static_cast<double>(n) * v - rest; break;
    case ReduceOp::kProd: kept = v / rest; break;
    default: kept = v; break;  // max, min, any, all: the keeper holds the value itself
  }
  return parts;
}

// Returns the addends of every element of `whole` for `partial` on `mesh`: one flat value
// list per partial slot (PartialSlot), split over the partial axes in ascending order.
inline std::vector<std::vector<double>> SplitPartial(const std::vector<double>& whole,
                                                     const PartialMap& partial, const Mesh& mesh,
                                                     const SplitOptions& options,
                                                     std::mt19937_64& rng) {
  std::vector<std::vector<double>> parts{whole};
  for (const auto& [axis, op] : partial) {
    const int64_t n = mesh.axis_size(axis);
    std::vector<std::vector<double>> next;
    for (const std::vector<double>& p : parts) {
      std::vector<std::vector<double>> split(static_cast<size_t>(n), p);
      for (size_t k = 0; k < p.size(); ++k) {
        const std::vector<double> addends = SplitValue(p[k], op, n, options, rng);
        for (int64_t i = 0; i < n; ++i) split[static_cast<size_t>(i)][k] = addends[static_cast<size_t>(i)];
      }
      for (std::vector<double>& q : split) next.push_back(std::move(q));
    }
    parts = std::move(next);
  }
  return parts;
}

// The slot of SplitPartial's result a rank at `coord` holds: the mixed-radix number of
// its coordinates on the partial axes, the lowest axis most significant.
inline int64_t PartialSlot(const PartialMap& partial, const Mesh& mesh,
                           const std::vector<int64_t>& coord) {
  int64_t slot = 0;
  for (const auto& [axis, op] : partial) slot = slot * mesh.axis_size(axis) + coord[static_cast<size_t>(axis)];
  return slot;
}

}  // namespace spmd
