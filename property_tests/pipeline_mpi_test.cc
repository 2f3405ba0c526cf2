// Pipeline training under mpirun with real Open MPI point-to-point equals one process.
//
// For every schedule (fill-drain, 1F1B, interleaved 1F1B with 2 chunks per stage) on every
// pipeline mesh that fits the world size (np 2: pp=2; np 4: pp=2 x dp=2, pp=4, pp=2 x tp=2
// with SP; np 8: pp=2 x dp=2 x tp=2), the small GPT (4 layers; uneven: batch 5 split into
// 3 micro-batches, 2 or 4 for the interleaved schedule, 3 heads, vocabulary 13; dropout
// 0.1; AdamW with clipping) trains a few steps in float64. Each rank also trains the same
// model alone (a one-rank mesh of itself, the same micro-batches: no communication) and
// compares every step's loss and every parameter its stage holds to 1e-9 relative (a
// parameter against its own largest magnitude). Each rank also checks that the most
// activations it held at once equals its stage's peak in the simulated schedule.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/comm/mpi_communicator.h"
#include "property_tests/train_history.h"
#include "runtime/testing/mpi_test_main.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

runtime::MpiCommunicator* g_comm = nullptr;

GptConfig SmallGpt() {
  GptConfig config;
  config.layers = 4;
  config.width = 12;
  config.heads = 3;
  config.vocab = 13;
  config.sequence = 6;
  config.mlp_ratio = 2;
  config.dropout = 0.1;
  return config;
}

History Alone(const BatchSpec& batch, int micro_batches, int steps) {
  TrainOptions options;
  options.micro_batches = micro_batches;
  Trainer trainer(SmallGpt(), Layout(Mesh({1}, {g_comm->rank()}, {"dp"}), Strategy{}), options,
                  *g_comm);
  return TrainHistory(trainer, batch, steps, *g_comm);
}

struct Case {
  const char* mesh;
  Strategy strategy;
};

std::vector<Case> CasesFor(int world) {
  switch (world) {
    case 2:
      return {{"pp=2", {}}};
    case 4:
      return {{"pp=2,dp=2", {1, false}}, {"pp=4", {}}, {"pp=2,tp=2", {0, true}}};
    case 8:
      return {{"pp=2,dp=2,tp=2", {2, true}}};
    default:
      return {};
  }
}

TEST(PipelineMpiTest, EveryScheduleTrainsLikeOneProcess) {
  const int world = runtime::WorldSize();
  ASSERT_TRUE(world == 2 || world == 4 || world == 8) << "run under mpirun -np 2, 4 or 8";
  const BatchSpec batch{5, 6, 3};
  const int steps = 2;
  std::map<int, History> alone;  // per micro-batch count
  for (const Case& c : CasesFor(world)) {
    const Mesh mesh = ParseNamedMesh(c.mesh);
    const int64_t p = mesh.axis_size(0);  // pp is the first axis of every case
    for (const ScheduleKind kind :
         {ScheduleKind::kFillDrain, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
      const bool interleaved = kind == ScheduleKind::kInterleaved;
      const int m = interleaved ? static_cast<int>(p) : 3;
      const std::string label =
          std::string(c.mesh) + " " + std::string(ToString(kind)) + " m=" + std::to_string(m);
      SCOPED_TRACE(label);
      if (!alone.count(m)) alone[m] = Alone(batch, m, steps);
      TrainOptions options;
      options.micro_batches = m;
      PipelineTrainer trainer(SmallGpt(), mesh, c.strategy, options, {kind, interleaved ? 2 : 1},
                              *g_comm);
      History got;
      for (int s = 0; s < steps; ++s) got.losses.push_back(trainer.Step(batch, s, *g_comm).loss);
      for (auto& [name, values] : trainer.GatherParams(*g_comm))
        got.params[name] = std::move(values);
      std::string error = CompareHistories(got, alone[m], 1e-9);
      const int64_t want_peak = SimulateSchedule(trainer.schedule()).peak_live[trainer.stage()];
      if (error.empty() && trainer.last_peak_live() != want_peak) {
        error = "held " + std::to_string(trainer.last_peak_live()) +
                " activations at once, the schedule " + std::to_string(want_peak);
      }
      EXPECT_EQ(runtime::FirstError(error), "");
    }
  }
}

}  // namespace
}  // namespace spmd::train

int main(int argc, char** argv) {
  return spmd::runtime::RunMpiTests(
      argc, argv, "", [](spmd::runtime::MpiCommunicator* c) { spmd::train::g_comm = c; });
}
