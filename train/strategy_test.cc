// Every parallel strategy trains the same model as one device (thread ranks, float64).
//
// For each layout (DP, ZeRO-1/2/3, TP, SP, and their combinations on 2-d meshes; uneven
// batch, vocabulary and head counts included) the small GPT is trained for a few AdamW
// steps with clipping; the loss of every step and every parameter after the last step
// must equal the one-rank run to 1e-9 relative. The same checks run under mpirun with
// real Open MPI collectives in property_tests/ (label mpi).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "runtime/thread_communicator.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

struct History {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
};

History Train(const GptConfig& config, const std::string& mesh_text, Strategy strategy,
          const BatchSpec& batch, int steps) {
  const Mesh mesh = ParseNamedMesh(mesh_text);
  History result;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    Trainer trainer(config, Layout(mesh, strategy), TrainOptions{}, comm);
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) losses.push_back(trainer.Step(batch, step, comm).loss);
    std::vector<std::vector<double>> params = trainer.GatherParams(comm);
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      result.losses = std::move(losses);
      result.params = std::move(params);
    }
  });
  return result;
}

void ExpectSame(const History& got, const History& want, double tolerance) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], tolerance * std::abs(want.losses[s])) << "step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t p = 0; p < want.params.size(); ++p) {
    ASSERT_EQ(got.params[p].size(), want.params[p].size());
    double scale = 0;
    for (double v : want.params[p]) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < want.params[p].size(); ++k) {
      ASSERT_NEAR(got.params[p][k], want.params[p][k], tolerance * std::max(scale, 1e-3))
          << "parameter " << p << " element " << k;
    }
  }
}

struct Layouts {
  const char* mesh;
  Strategy strategy;
};

TEST(StrategyTest, EveryLayoutTrainsLikeOneDevice) {
  GptConfig config;
  config.layers = 2;
  config.width = 12;
  config.heads = 3;   // uneven over tp = 2
  config.vocab = 13;  // uneven over tp = 2
  config.sequence = 5;
  config.mlp_ratio = 2;
  BatchSpec batch{3, 5, 7};  // batch 3: uneven over dp = 2
  const int steps = 3;
  const History single = Train(config, "dp=1", Strategy{}, batch, steps);
  ASSERT_EQ(single.losses.size(), 3u);
  EXPECT_LT(single.losses[2], single.losses[0]);  // it learns

  const Layouts layouts[] = {
      {"dp=2", {0, false}},       {"dp=2", {1, false}},      {"dp=2", {2, false}},
      {"dp=2", {3, false}},       {"tp=2", {0, false}},      {"tp=2", {0, true}},
      {"dp=2,tp=2", {0, false}},  {"dp=2,tp=2", {1, true}},  {"dp=2,tp=2", {3, true}},
      {"dp=3", {2, false}},
  };
  for (const Layouts& l : layouts) {
    SCOPED_TRACE(std::string(l.mesh) + " zero=" + std::to_string(l.strategy.zero_stage) +
                 " sp=" + std::to_string(l.strategy.sequence_parallel));
    ExpectSame(Train(config, l.mesh, l.strategy, batch, steps), single, 1e-9);
  }
}

TEST(StrategyTest, SwiGluTrainsLikeOneDevice) {
  GptConfig config;
  config.layers = 1;
  config.width = 8;
  config.heads = 2;
  config.vocab = 9;
  config.sequence = 4;
  config.swiglu = true;
  BatchSpec batch{4, 4, 3};
  const History single = Train(config, "dp=1", Strategy{}, batch, 2);
  ExpectSame(Train(config, "dp=2,tp=2", Strategy{2, true}, batch, 2), single, 1e-9);
}

}  // namespace
}  // namespace spmd::train
