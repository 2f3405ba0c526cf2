// Every parallel strategy trains the same model as one device (thread ranks, float64).
//
// For each layout (DP, ZeRO-1/2/3, TP, SP, and their combinations on 2-d meshes; uneven
// batch, vocabulary and head counts included) the small GPT is trained for a few AdamW
// steps with clipping; the loss of every step and every parameter after the last step
// must equal the one-rank run to 1e-9 relative. The same checks run under mpirun with
// real Open MPI collectives in property_tests/ (label mpi).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "runtime/thread_communicator.h"
#include "train/checkpoint.h"
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

// Trains steps [first, first + steps) on `mesh_text`; loads the checkpoint in `load` first
// and saves one to `save` after, when given.
History Train(const GptConfig& config, const std::string& mesh_text, Strategy strategy,
          const BatchSpec& batch, int steps, int first = 0, const std::string& load = "",
          const std::string& save = "") {
  const Mesh mesh = ParseNamedMesh(mesh_text);
  History result;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    Trainer trainer(config, Layout(mesh, strategy), TrainOptions{}, comm);
    if (!load.empty()) LoadCheckpoint(trainer, load, comm);
    std::vector<double> losses;
    for (int step = first; step < first + steps; ++step) losses.push_back(trainer.Step(batch, step, comm).loss);
    if (!save.empty()) SaveCheckpoint(trainer, save, comm);
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

// A checkpoint saved under one layout and loaded under another continues the same
// training: 2 steps on dp=2,tp=2 (ZeRO-1, SP), saved; 2 more on dp=4 (ZeRO-3) and on one
// rank, each loaded from it; both equal 4 uninterrupted steps on one rank.
TEST(StrategyTest, CheckpointsMoveBetweenLayouts) {
  GptConfig config;
  config.layers = 1;
  config.width = 12;
  config.heads = 3;
  config.vocab = 13;
  config.sequence = 5;
  const BatchSpec batch{4, 5, 11};
  const std::string dir = ::testing::TempDir() + "spmd_checkpoint_" + std::to_string(::getpid());
  const History whole = Train(config, "dp=1", Strategy{}, batch, 4);
  const History first = Train(config, "dp=2,tp=2", Strategy{1, true}, batch, 2, 0, "", dir);
  for (const auto& [mesh, strategy] : {std::pair{"dp=4", Strategy{3, false}}, std::pair{"dp=1", Strategy{}}}) {
    SCOPED_TRACE(mesh);
    const History second = Train(config, mesh, strategy, batch, 2, 2, dir);
    History joined = second;
    joined.losses.insert(joined.losses.begin(), first.losses.begin(), first.losses.end());
    ExpectSame(joined, whole, 1e-9);
  }
  std::filesystem::remove_all(dir);
}

TEST(StrategyTest, BadCheckpointsGetTypedErrors) {
  GptConfig config;
  config.layers = 1;
  config.width = 4;
  config.heads = 1;
  config.vocab = 5;
  config.sequence = 3;
  const std::string dir = ::testing::TempDir() + "spmd_bad_checkpoint_" + std::to_string(::getpid());
  const BatchSpec batch{2, 3, 1};
  Train(config, "dp=2", Strategy{}, batch, 1, 0, "", dir);
  auto load_error = [&](const GptConfig& c) -> std::string {
    try {
      Train(c, "dp=1", Strategy{}, batch, 1, 1, dir);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  // Another model's shapes.
  GptConfig wider = config;
  wider.width = 8;
  EXPECT_NE(load_error(wider).find("checkpoint"), std::string::npos) << load_error(wider);
  // A shard file cut short.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".bin") {
      std::filesystem::resize_file(entry.path(), 3);
      break;
    }
  }
  EXPECT_NE(load_error(config).find("does not hold"), std::string::npos) << load_error(config);
  std::filesystem::remove_all(dir);
  EXPECT_NE(load_error(config).find("cannot read"), std::string::npos) << load_error(config);
}

}  // namespace
}  // namespace spmd::train
