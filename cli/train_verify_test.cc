// spmd-train --verify's measure (cli/train_verify.h) over generated runs: identical runs
// differ by 0, one perturbed value by its relative size, and any NaN or infinity in
// either run, in a loss or a parameter, by +infinity.
#include "cli/train_verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace spmd::cli {
namespace {

struct RunRecord {
  std::vector<double> losses;
  std::vector<std::string> names;
  std::vector<std::vector<double>> params;
};

RunRecord RandomRun(std::mt19937& gen) {
  std::uniform_real_distribution<double> value(-2, 2);
  RunRecord run;
  for (int s = 0; s < 1 + static_cast<int>(gen() % 5); ++s) run.losses.push_back(1 + std::abs(value(gen)));
  for (int p = 0; p < 1 + static_cast<int>(gen() % 4); ++p) {
    run.names.push_back("p" + std::to_string(p));
    run.params.emplace_back(1 + gen() % 6);
    for (double& v : run.params.back()) v = value(gen);
  }
  return run;
}

// A value of the run to change: a loss or a parameter element, chosen by `pick`.
double& ValueAt(RunRecord& run, size_t pick, bool* is_loss = nullptr) {
  size_t total = run.losses.size();
  for (const auto& p : run.params) total += p.size();
  pick %= total;
  if (is_loss) *is_loss = pick < run.losses.size();
  if (pick < run.losses.size()) return run.losses[pick];
  pick -= run.losses.size();
  for (auto& p : run.params) {
    if (pick < p.size()) return p[pick];
    pick -= p.size();
  }
  return run.losses[0];
}

TEST(TrainVerifyTest, NonFiniteValuesInEitherRunNeverPass) {
  std::mt19937 gen(5);
  const double bad[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (int trial = 0; trial < 300; ++trial) {
    const RunRecord reference = RandomRun(gen);
    EXPECT_EQ(MaxRelativeDifference(reference, reference), 0.0);
    RunRecord parallel = reference, broken_reference = reference;
    ValueAt(trial % 2 ? parallel : broken_reference, gen()) = bad[trial % 3];
    EXPECT_EQ(MaxRelativeDifference(parallel, broken_reference), std::numeric_limits<double>::infinity());
  }
}

TEST(TrainVerifyTest, OnePerturbedValueGivesItsRelativeSize) {
  std::mt19937 gen(9);
  for (int trial = 0; trial < 300; ++trial) {
    const RunRecord reference = RandomRun(gen);
    RunRecord parallel = reference;
    bool is_loss = false;
    double& v = ValueAt(parallel, gen(), &is_loss);
    const double want = v;
    v += 1e-6;
    double scale = 1e-30;
    for (const auto& p : reference.params) {
      for (double x : p) scale = std::max(scale, std::abs(x));
    }
    const double expected = is_loss ? 1e-6 / std::abs(want) : 1e-6 / scale;
    EXPECT_NEAR(MaxRelativeDifference(parallel, reference), expected, 1e-8 * expected);
  }
}

TEST(TrainVerifyTest, AParameterTheReferenceLacksNeverPasses) {
  std::mt19937 gen(3);
  const RunRecord reference = RandomRun(gen);
  RunRecord renamed = reference, resized = reference;
  renamed.names.back() = "not_in_the_model";
  resized.params.back().push_back(0);
  EXPECT_EQ(MaxRelativeDifference(renamed, reference), std::numeric_limits<double>::infinity());
  EXPECT_EQ(MaxRelativeDifference(resized, reference), std::numeric_limits<double>::infinity());
}

// Mixed precision's measure: a loss change at step t counts divided by growth^t, a parameter
// change by its absolute size; any NaN, infinity or missing parameter is +infinity.
TEST(TrainVerifyTest, MixedMeasureDividesLossesByGrowthAndKeepsParametersAbsolute) {
  std::mt19937 gen(3);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (int trial = 0; trial < 200; ++trial) {
    const RunRecord reference = RandomRun(gen);
    EXPECT_EQ(MaxMixedDifference(reference, reference, 1.2).loss, 0);
    RunRecord changed = reference;
    bool is_loss = false;
    const size_t pick = gen();
    double& v = ValueAt(changed, pick, &is_loss);
    const double old = v;
    v += 0.25;
    const MixedDifference d = MaxMixedDifference(changed, reference, 1.2);
    if (is_loss) {
      size_t step = 0;
      while (&changed.losses[step] != &v) ++step;
      EXPECT_NEAR(d.loss, 0.25 / old / std::pow(1.2, static_cast<double>(step)), 1e-12);
      EXPECT_EQ(d.params, 0);
    } else {
      EXPECT_EQ(d.loss, 0);
      EXPECT_NEAR(d.params, 0.25, 1e-12);
    }
    v = std::nan("");
    EXPECT_EQ(MaxMixedDifference(changed, reference, 1.2).loss, kInf);
    changed = reference;
    changed.names[0] = "missing";
    EXPECT_EQ(MaxMixedDifference(changed, reference, 1.2).params, kInf);
  }
}

}  // namespace
}  // namespace spmd::cli
