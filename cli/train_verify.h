// spmd-train --verify's measure: how far a parallel run is from the one-process run.
//
// The largest of every step's loss difference relative to the reference loss and every
// parameter element's difference relative to the reference model's largest magnitude
// (a parameter whose gradient is zero in exact arithmetic, an attention key's bias, gets
// rounding noise for a gradient, which AdamW turns into tiny steps with no relative
// accuracy of their own). Parameters are matched by name (under pp a rank holds its
// stage's only). Any NaN or infinity in either run, a loss or a parameter, and a
// parameter the reference does not have (or of another size), give +infinity: never a
// pass. (std::max(worst, NaN) keeps `worst`, which is how a NaN run used to pass.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace spmd::cli {

// Run: .losses (vector<double>), .names (vector<string>), .params (vector<vector<double>>).
template <typename Run>
double MaxRelativeDifference(const Run& parallel, const Run& reference) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double worst = 0;
  auto take = [&](double difference) {
    worst = std::isfinite(difference) ? (difference > worst ? difference : worst) : kInf;
  };
  if (parallel.losses.size() != reference.losses.size()) return kInf;
  for (std::size_t s = 0; s < reference.losses.size(); ++s) {
    const double got = parallel.losses[s], want = reference.losses[s];
    if (!std::isfinite(got) || !std::isfinite(want)) return kInf;
    take(std::abs(got - want) / std::max(std::abs(want), 1e-30));
  }
  double scale = 1e-30;
  for (const auto& param : reference.params) {
    for (double v : param) {
      if (!std::isfinite(v)) return kInf;
      scale = std::max(scale, std::abs(v));
    }
  }
  for (std::size_t p = 0; p < parallel.params.size(); ++p) {
    std::size_t r = 0;
    while (r < reference.names.size() && reference.names[r] != parallel.names[p]) ++r;
    if (r == reference.names.size() || reference.params[r].size() != parallel.params[p].size()) {
      return kInf;
    }
    for (std::size_t k = 0; k < reference.params[r].size(); ++k) {
      const double got = parallel.params[p][k];
      if (!std::isfinite(got)) return kInf;
      take(std::abs(got - reference.params[r][k]) / scale);
    }
  }
  return worst;
}

// Mixed precision's measure (train/precision.h, MixedBounds): `loss`, the largest over steps
// t of the loss difference relative to the reference loss divided by growth^t (to compare
// with c * u), and `params`, the largest difference of a parameter element (absolute, to
// compare with AdamWDriftBound). Matched and NaN-aware as MaxRelativeDifference: a missing
// or mismatched parameter, a NaN or an infinity give +infinity.
struct MixedDifference {
  double loss = 0;
  double params = 0;
};

template <typename Run>
MixedDifference MaxMixedDifference(const Run& parallel, const Run& reference, double growth) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  MixedDifference d;
  auto take = [](double& worst, double difference) {
    worst = std::isfinite(difference) ? (difference > worst ? difference : worst) : kInf;
  };
  if (parallel.losses.size() != reference.losses.size()) return {kInf, kInf};
  double power = 1;
  for (std::size_t s = 0; s < reference.losses.size(); ++s, power *= growth) {
    const double got = parallel.losses[s], want = reference.losses[s];
    if (!std::isfinite(got) || !std::isfinite(want)) return {kInf, kInf};
    take(d.loss, std::abs(got - want) / std::max(std::abs(want), 1e-30) / power);
  }
  for (std::size_t p = 0; p < parallel.params.size(); ++p) {
    std::size_t r = 0;
    while (r < reference.names.size() && reference.names[r] != parallel.names[p]) ++r;
    if (r == reference.names.size() || reference.params[r].size() != parallel.params[p].size()) {
      return {kInf, kInf};
    }
    for (std::size_t k = 0; k < reference.params[r].size(); ++k) {
      const double got = parallel.params[p][k], want = reference.params[r][k];
      if (!std::isfinite(got) || !std::isfinite(want)) return {kInf, kInf};
      take(d.params, std::abs(got - want));
    }
  }
  return d;
}

}  // namespace spmd::cli
