// Mixed precision (train/precision.h), thread ranks.
//
// Properties over generated small models and layouts (DP, ZeRO-1/2/3, TP, SP and their
// combinations): a bf16-mixed or fp16-mixed distributed run equals one process in the same
// precision within BoundsFor's bounds, and one process tracks float64 within its bound;
// the masters, moments and gradients stay float32 and every gradient reduction moves float32
// (the bytes of the fp32 run); fp16 loss scaling skips a step whose gradients overflow
// without changing any parameter or optimizer state, backs the scale off, counts the step,
// and stops with a NonFiniteError naming the step once the scale would fall below its floor.
// MEASURE=1 (DISABLED_Measure) prints the differences over many configs that
// docs/TRAINING.md "Mixed precision" reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "runtime/thread_communicator.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

struct History {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  std::vector<StepStats> stats;
  std::vector<std::string> names;
};

struct Case {
  GptConfig config;
  std::string mesh;
  Strategy strategy;
  BatchSpec batch;
  int micro_batches = 1;
  int steps = 4;
  std::string Describe() const {
    return mesh + " zero=" + std::to_string(strategy.zero_stage) + " sp=" + std::to_string(strategy.sequence_parallel) +
           " layers=" + std::to_string(config.layers) + " width=" + std::to_string(config.width) +
           " heads=" + std::to_string(config.heads) + " vocab=" + std::to_string(config.vocab) +
           " batch=" + std::to_string(batch.batch) + "x" + std::to_string(batch.sequence) +
           " micro=" + std::to_string(micro_batches) + (config.swiglu ? " swiglu" : "") +
           (config.rms_norm ? " rms" : "") + " seed=" + std::to_string(config.seed);
  }
};

// Trains `c` on its mesh (or on one rank when `single`) in `precision` (float64 model
// for fp32 when `float64`); rank 0's history.
History Train(const Case& c, Precision precision, bool single = false, bool float64 = false) {
  const Mesh mesh = ParseNamedMesh(single ? "dp=1" : c.mesh);
  GptConfig config = c.config;
  config.dtype = float64 ? DType::kFloat64 : DType::kFloat32;
  TrainOptions options;
  options.precision = precision;
  options.micro_batches = c.micro_batches;
  History run;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    Trainer trainer(config, Layout(mesh, single ? Strategy{} : c.strategy), options, comm);
    std::vector<StepStats> stats;
    for (int step = 0; step < c.steps; ++step) stats.push_back(trainer.Step(c.batch, step, comm));
    std::vector<std::vector<double>> params = trainer.GatherParams(comm);
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      for (const StepStats& s : stats) run.losses.push_back(s.loss);
      run.stats = std::move(stats);
      run.params = std::move(params);
      for (const NamedParam& p : trainer.model().params()) run.names.push_back(p.name);
    }
  });
  return run;
}

// The largest loss difference relative to the reference loss, and the largest parameter
// difference relative to the reference's largest parameter magnitude (cli/train_verify.h's
// two halves); NaN-aware (a non-finite value is +infinity).
struct Differences {
  double loss = 0, params = 0;
  std::string worst_param;
  double loss_units = 0;  // max over steps t of the loss difference / (u growth^t): the c it needs
  double params_abs = 0;  // the largest parameter difference, absolute
};
Differences Compare(const History& got, const History& want, const MixedBounds& bounds = {1, 1.2, 0, 0}) {
  const double inf = std::numeric_limits<double>::infinity();
  Differences d;
  auto take = [&](double& worst, double v) { worst = std::isfinite(v) ? std::max(worst, v) : inf; };
  if (got.losses.size() != want.losses.size() || got.params.size() != want.params.size()) return {inf, inf, ""};
  for (size_t s = 0; s < want.losses.size(); ++s) {
    take(d.loss, std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]));
    take(d.loss_units, std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]) /
                           bounds.Loss(1, static_cast<int64_t>(s)));
  }
  double scale = 1e-30;
  for (const auto& p : want.params) {
    for (double v : p) scale = std::max(scale, std::abs(v));
  }
  for (size_t p = 0; p < want.params.size(); ++p) {
    if (got.params[p].size() != want.params[p].size()) return {inf, inf, ""};
    for (size_t k = 0; k < want.params[p].size(); ++k) {
      const double before = d.params;
      take(d.params, std::abs(got.params[p][k] - want.params[p][k]) / scale);
      take(d.params_abs, std::abs(got.params[p][k] - want.params[p][k]));
      if (d.params > before && p < want.names.size()) d.worst_param = want.names[p];
    }
  }
  return d;
}

const char* const kMeshes[][2] = {{"dp=2", "0"}, {"dp=2", "1"}, {"dp=2", "2"}, {"dp=2", "3"},
                                  {"tp=2", "0"}, {"tp=2", "0s"}, {"sp=2", "0"}, {"dp=2,tp=2", "1s"},
                                  {"dp=2,tp=2", "3"}, {"dp=2,sp=2", "2"}, {"dp=3", "2"}};

// A generated case: model sizes, layout and batch from `rng`.
Case MakeCase(std::mt19937_64& rng, int steps) {
  auto pick = [&](int lo, int hi) { return static_cast<int>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  Case c;
  c.config.layers = pick(1, 2);
  c.config.heads = pick(1, 3);
  c.config.width = c.config.heads * pick(2, 5);
  c.config.vocab = pick(7, 19);
  c.config.mlp_ratio = pick(1, 3);
  c.config.swiglu = pick(0, 1) == 1;
  c.config.rms_norm = pick(0, 1) == 1;
  c.config.seed = static_cast<uint64_t>(pick(1, 1000));
  const auto& m = kMeshes[pick(0, static_cast<int>(std::size(kMeshes)) - 1)];
  c.mesh = m[0];
  c.strategy.zero_stage = m[1][0] - '0';
  c.strategy.sequence_parallel = m[1][1] == 's';
  c.batch.sequence = pick(2, 6);
  c.config.sequence = c.batch.sequence;
  c.batch.batch = pick(2, 5);
  c.batch.seed = static_cast<uint64_t>(pick(1, 1000));
  c.micro_batches = pick(1, 2);
  c.steps = steps;
  return c;
}

// MEASURE: the differences docs/TRAINING.md reports (run by hand:
// precision_test --gtest_also_run_disabled_tests --gtest_filter='*Measure*').
TEST(PrecisionTest, DISABLED_Measure) {
  const int cases = std::getenv("MEASURE_CASES") ? std::atoi(std::getenv("MEASURE_CASES")) : 40;
  const int steps = std::getenv("MEASURE_STEPS") ? std::atoi(std::getenv("MEASURE_STEPS")) : 10;
  const double drift = AdamWDriftBound(TrainOptions{}.lr, TrainOptions{}.beta1, TrainOptions{}.beta2, steps);
  for (Precision precision : {Precision::kBf16Mixed, Precision::kFp16Mixed}) {
    const MixedBounds bounds = MixedBoundsFor(precision);
    std::mt19937_64 rng(7);
    Differences worst_dist, worst_64;
    double fp32_units = 0;
    int disagreements = 0;
    for (int i = 0; i < cases; ++i) {
      const Case c = MakeCase(rng, steps);
      const History dist = Train(c, precision), one = Train(c, precision, true);
      const History exact = Train(c, Precision::kFp32, true, true);
      const History fp32 = Train(c, Precision::kFp32);
      const Differences a = Compare(dist, one, bounds), b = Compare(one, exact, bounds);
      const Differences f = Compare(fp32, exact, {0x1p-24, bounds.growth, 0, 0});
      std::string skips_dist, skips_one;
      for (const StepStats& s : dist.stats) skips_dist += s.skipped ? "x" : ".";
      for (const StepStats& s : one.stats) skips_one += s.skipped ? "x" : ".";
      const bool agree = skips_dist == skips_one;
      std::printf("%s %s: dist-vs-one loss %.3g (c %.3g) params %.3g (%s); one-vs-float64 loss %.3g (c %.3g) "
                  "params %.3g (%s); fp32 dist-vs-float64 c %.3g; skips %s %s%s\n",
                  std::string(ToString(precision)).c_str(), c.Describe().c_str(), a.loss, a.loss_units,
                  a.params_abs, a.worst_param.c_str(), b.loss, b.loss_units, b.params_abs, b.worst_param.c_str(),
                  f.loss_units, skips_dist.c_str(), skips_one.c_str(), agree ? "" : " DISAGREE");
      if (!agree) {
        ++disagreements;
        continue;
      }
      worst_dist = {std::max(worst_dist.loss, a.loss), 0, "", std::max(worst_dist.loss_units, a.loss_units),
                    std::max(worst_dist.params_abs, a.params_abs)};
      worst_64 = {std::max(worst_64.loss, b.loss), 0, "", std::max(worst_64.loss_units, b.loss_units),
                  std::max(worst_64.params_abs, b.params_abs)};
      fp32_units = std::max(fp32_units, f.loss_units);
    }
    std::printf("%s worst over %d cases (%d with skips that disagree left out), %d steps: dist-vs-one loss %.3g "
                "c %.3g, params %.3g; one-vs-float64 loss %.3g c %.3g, params %.3g; AdamW drift bound %.3g; "
                "fp32 dist-vs-float64 c %.3g (u = 2^-24)\n",
                std::string(ToString(precision)).c_str(), cases, disagreements, steps, worst_dist.loss,
                worst_dist.loss_units, worst_dist.params_abs, worst_64.loss, worst_64.loss_units, worst_64.params_abs,
                drift, fp32_units);
  }
}

}  // namespace
}  // namespace spmd::train
