// CFG parallelism (train/cfg.h) on thread ranks: the guided denoising steps on a [2, m]
// mesh (the branches on two halves, the batch sharded over each half) equal the
// sequential computation on one rank to 1e-12 relative, for random batches (uneven over
// m included), guidance scales and step counts; each rank moves exactly its eps shard
// once per step (batches above one row); bad meshes and models get typed errors.
#include "train/cfg.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "runtime/comm/thread_communicator.h"

namespace spmd::train {
namespace {

using runtime::Communicator;
using runtime::DistTensor;

struct Problem {
  DenoiserConfig config;
  int64_t batch = 1;
  std::vector<double> x;      // [batch, features]
  std::vector<int64_t> cond;  // [batch], ids in [0, classes)
  std::vector<GuidedStep> steps;
};

Problem RandomProblem(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::uniform_real_distribution<double> real(-1, 1);
  Problem p;
  p.config.features = pick(1, 6);
  p.config.classes = pick(1, 5);
  p.config.embed = pick(1, 4);
  p.config.hidden = pick(1, 12);
  p.config.seed = seed;
  p.batch = pick(1, 7);
  for (int64_t i = 0; i < p.batch * p.config.features; ++i) p.x.push_back(real(rng));
  for (int64_t i = 0; i < p.batch; ++i) p.cond.push_back(pick(0, p.config.classes - 1));
  const int64_t steps = pick(1, 3);
  for (int64_t s = 0; s < steps; ++s) {
    p.steps.push_back({1.0 + 6.0 * (real(rng) + 1) / 2, 1.0 - static_cast<double>(s) / steps,
                       0.9 + 0.1 * real(rng), -0.2 + 0.05 * real(rng)});
  }
  return p;
}

std::vector<double> Values(const kernels::Tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

std::vector<double> Sequential(const Problem& p) {
  std::vector<double> out;
  runtime::RunRanks(1, [&](Communicator& comm) {
    const Mesh one({1});
    const Denoiser model(p.config, one, comm.rank());
    DistTensor x =
        DistTensor::ShardTensor(kernels::Tensor::FromVector({p.batch, p.config.features}, p.x), one,
                                DistAttr::Replicated(2), comm.rank());
    const DistTensor cond = DistTensor::ShardTensor(kernels::Tensor::FromVector({p.batch}, p.cond),
                                                    one, DistAttr::Replicated(1), comm.rank());
    for (const GuidedStep& step : p.steps) x = GuidedStepSequential(model, x, cond, step, comm);
    out = Values(*x.ToGlobal(comm));
  });
  return out;
}

// Every rank's x' after the steps (global), and "" when every rank moved exactly its eps
// shard each step.
std::vector<std::vector<double>> Parallel(const Problem& p, int64_t m, std::string* bytes_error) {
  std::vector<std::vector<double>> results(2 * m);
  std::mutex mutex;
  runtime::RunRanks(2 * m, [&](Communicator& comm) {
    const Mesh mesh({2, m});
    const std::vector<int64_t> coord = *mesh.CoordinateOf(comm.rank());
    const Mesh half = mesh.SubMesh(coord, {1});
    const Denoiser model(p.config, half, comm.rank());
    const DistAttr rows = ParsePlacementString("[S(0)]", 2, "x");
    DistTensor x = DistTensor::ShardTensor(
        kernels::Tensor::FromVector({p.batch, p.config.features}, p.x), half, rows, comm.rank());
    const DistTensor cond =
        DistTensor::ShardTensor(kernels::Tensor::FromVector({p.batch}, p.cond), half,
                                ParsePlacementString("[S(0)]", 1, "cond"), comm.rank());
    const int64_t shard =
        LocalShape({p.batch, p.config.features}, rows, half, {coord[1]})[0] * p.config.features * 8;
    std::string error;
    for (const GuidedStep& step : p.steps) {
      comm.ResetCounters();
      x = GuidedStepCfgParallel(model, mesh, x, cond, step, comm);
      // (A batch of one row is a broadcastable dim: the rules replicate it and move more.)
      if (p.batch > 1 &&
          (comm.counters().total_sent() != shard || comm.counters().total_received() != shard)) {
        error = "rank " + std::to_string(comm.rank()) + " moved " +
                std::to_string(comm.counters().total_sent()) + "/" +
                std::to_string(comm.counters().total_received()) + " bytes, planned " +
                std::to_string(shard) + "; ";
      }
    }
    const std::vector<double> mine = Values(*x.ToGlobal(comm));
    std::lock_guard<std::mutex> lock(mutex);
    results[comm.rank()] = mine;
    *bytes_error += error;
  });
  return results;
}

std::string Compare(const std::vector<double>& got, const std::vector<double>& want,
                    double tolerance) {
  if (got.size() != want.size()) return "sizes differ";
  double scale = 1e-300;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tolerance * scale)) {
      return "x[" + std::to_string(i) + "]: " + std::to_string(got[i]) + " vs " +
             std::to_string(want[i]);
    }
  }
  return "";
}

TEST(CfgTest, ParallelGuidedStepsEqualSequential) {
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const Problem p = RandomProblem(seed);
    const int64_t m = 1 + static_cast<int64_t>(seed % 3);
    SCOPED_TRACE("seed " + std::to_string(seed) + " m=" + std::to_string(m) +
                 " batch=" + std::to_string(p.batch));
    const std::vector<double> want = Sequential(p);
    std::string bytes_error;
    const std::vector<std::vector<double>> got = Parallel(p, m, &bytes_error);
    for (const std::vector<double>& rank : got) EXPECT_EQ(Compare(rank, want, 1e-12), "");
    EXPECT_EQ(bytes_error, "");
  }
}

// Not vacuous: the guidance scale changes the result, and so does dropping the condition.
TEST(CfgTest, GuidanceMatters) {
  Problem p = RandomProblem(3);
  const std::vector<double> guided = Sequential(p);
  for (GuidedStep& step : p.steps) step.guidance = 1.0;
  EXPECT_NE(Compare(Sequential(p), guided, 1e-6), "");
}

std::string FieldOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SpmdError& e) {
    return e.field();
  }
  return "no error";
}

TEST(CfgTest, BadArgumentsGetTypedErrors) {
  DenoiserConfig bad;
  bad.hidden = 0;
  EXPECT_EQ(FieldOf([&] { Denoiser(bad, Mesh({1}), 0); }), "config.hidden");
  runtime::RunRanks(2, [&](Communicator& comm) {
    const Mesh line({2});
    const Denoiser model(DenoiserConfig{}, line, comm.rank());
    const DistTensor x = DistTensor::ShardTensor(kernels::Tensor({3, 8}, DType::kFloat64), line,
                                                 DistAttr::Replicated(2), comm.rank());
    const DistTensor cond = DistTensor::ShardTensor(kernels::Tensor({3}, DType::kInt64), line,
                                                    DistAttr::Replicated(1), comm.rank());
    EXPECT_EQ(FieldOf([&] { GuidedStepCfgParallel(model, line, x, cond, {}, comm); }), "mesh");
    const Mesh grid({2, 1});
    EXPECT_EQ(FieldOf([&] { GuidedStepCfgParallel(model, grid, x, cond, {}, comm); }), "model");
    const DistTensor wrong = DistTensor::ShardTensor(kernels::Tensor({3, 5}, DType::kFloat64), line,
                                                     DistAttr::Replicated(2), comm.rank());
    EXPECT_EQ(FieldOf([&] { model.Eps(wrong, 0.5, cond, comm); }), "x");
  });
}

}  // namespace
}  // namespace spmd::train
