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
    }
  });
  return run;
}

// The largest loss difference relative to the reference loss, and the largest parameter
// difference relative to the reference's largest parameter magnitude (cli/train_verify.h's
// two halves); NaN-aware (a non-finite value is +infinity).
struct Differences {
  double loss = 0, params = 0;
};
Differences Compare(const History& got, const History& want) {
  const double inf = std::numeric_limits<double>::infinity();
  Differences d;
  auto take = [&](double& worst, double v) { worst = std::isfinite(v) ? std::max(worst, v) : inf; };
  if (got.losses.size() != want.losses.size() || got.params.size() != want.params.size()) return {inf, inf};
  for (size_t s = 0; s < want.losses.size(); ++s) {
    take(d.loss, std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]));
  }
  double scale = 1e-30;
  for (const auto& p : want.params) {
    for (double v : p) scale = std::max(scale, std::abs(v));
  }
  for (size_t p = 0; p < want.params.size(); ++p) {
    if (got.params[p].size() != want.params[p].size()) return {inf, inf};
    for (size_t k = 0; k < want.params[p].size(); ++k) take(d.params, std::abs(got.params[p][k] - want.params[p][k]) / scale);
  }
  return d;
}

const char* const kMeshes[][2] = {{"dp=2", "0"}, {"dp=2", "1"}, {"dp=2", "2"}, {"dp=2", "3"},
                                  {"tp=2", "0"}, {"tp=2", "s"}, {"sp=2", "0"}, {"dp=2,tp=2", "1s"},
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
  for (Precision precision : {Precision::kBf16Mixed, Precision::kFp16Mixed}) {
    std::mt19937_64 rng(7);
    Differences worst_dist, worst_64, worst_fp32;
    for (int i = 0; i < cases; ++i) {
      const Case c = MakeCase(rng, steps);
      const History dist = Train(c, precision), one = Train(c, precision, true);
      const History exact = Train(c, Precision::kFp32, true, true);
      const History fp32 = Train(c, Precision::kFp32);
      const Differences a = Compare(dist, one), b = Compare(one, exact), f = Compare(fp32, exact);
      std::printf("%s %s: dist-vs-one loss %.3g params %.3g; one-vs-float64 loss %.3g params %.3g; "
                  "fp32-dist-vs-float64 loss %.3g params %.3g\n",
                  std::string(ToString(precision)).c_str(), c.Describe().c_str(), a.loss, a.params, b.loss, b.params,
                  f.loss, f.params);
      worst_dist = {std::max(worst_dist.loss, a.loss), std::max(worst_dist.params, a.params)};
      worst_64 = {std::max(worst_64.loss, b.loss), std::max(worst_64.params, b.params)};
      worst_fp32 = {std::max(worst_fp32.loss, f.loss), std::max(worst_fp32.params, f.params)};
    }
    const double u = precision == Precision::kBf16Mixed ? 0x1p-8 : 0x1p-11;
    std::printf("%s worst over %d cases, %d steps: dist-vs-one loss %.3g (%.2f u) params %.3g; one-vs-float64 "
                "loss %.3g (%.2f u) params %.3g; fp32 dist-vs-float64 loss %.3g params %.3g\n",
                std::string(ToString(precision)).c_str(), cases, steps, worst_dist.loss, worst_dist.loss / u,
                worst_dist.params, worst_64.loss, worst_64.loss / u, worst_64.params, worst_fp32.loss,
                worst_fp32.params);
  }
}

}  // namespace
}  // namespace spmd::train
namespace spmd::train {
namespace {
TEST(PrecisionTest, DISABLED_Debug) {
  std::mt19937_64 rng(7);
  const Case c = MakeCase(rng, 10);
  for (Precision p : {Precision::kFp16Mixed, Precision::kBf16Mixed}) {
    const History h = Train(c, p, true);
    for (const StepStats& s : h.stats) std::printf("%s loss %.6f norm %g scale %g skipped %d\n", std::string(ToString(p)).c_str(), s.loss, s.grad_norm, s.loss_scale, s.skipped);
  }
}
}  // namespace
}  // namespace spmd::train
namespace spmd::train {
namespace {
TEST(PrecisionTest, DISABLED_Debug2) {
  std::mt19937_64 rng(7);
  Case c = MakeCase(rng, 10);
  c.config.dtype = DType::kFloat32;
  c.config.compute_dtype = DType::kFloat16;
  const Mesh mesh = ParseNamedMesh("dp=1");
  runtime::RunRanks(1, [&](runtime::Communicator& comm) {
    Gpt model(c.config, Layout(mesh, Strategy{}), comm);
    kernels::Tensor tokens, labels;
    MakeBatch(c.batch, c.config.vocab, 0, &tokens, &labels);
    auto shard = [&](const kernels::Tensor& t) { return runtime::DistTensor::ShardTensor(t, mesh, DistAttr::Replicated(2), 0); };
    Variable loss = model.Loss(shard(tokens), shard(labels), comm);
    Backward(loss, comm);
    for (const NamedParam& p : model.params()) {
      const kernels::Tensor g = *p.value.grad()->ToGlobal(comm);
      int bad = 0;
      for (int64_t i = 0; i < g.numel(); ++i) bad += !std::isfinite(g.data<float>()[i]);
      std::printf("%s %s bad %d\n", p.name.c_str(), std::string(ToString(g.dtype())).c_str(), bad);
    }
  });
}
}  // namespace
}  // namespace spmd::train
