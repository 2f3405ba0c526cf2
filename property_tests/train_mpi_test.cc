// Training under mpirun with real Open MPI collectives equals training on one process.
//
// For every layout that fits the world size (DP, ZeRO-1/2/3, TP, SP and their
// combinations; in float32 the first and the last of them), the small GPT (uneven: batch 5, 3 heads, vocabulary 13) trains a few
// AdamW steps with clipping. Each rank also trains the same model alone (a one-rank mesh
// of itself: no communication) and compares: float64, every step's loss and every final
// parameter to 1e-9 relative to that parameter's largest magnitude; float32, the losses to
// 1e-4 relative and the parameters to 1e-4 of the model's largest magnitude (the order
// of additions differs between layouts: sharded contractions and reductions sum in other
// orders. A parameter whose gradient is zero in exact arithmetic, such as an attention
// key's bias, gets float32 rounding noise for a gradient, which AdamW normalises into
// steps: per parameter, such a value has no relative accuracy to hold).
#include <mpi.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/comm/mpi_communicator.h"
#include "property_tests/train_history.h"
#include "runtime/testing/mpi_test_main.h"
#include "train/layout.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

runtime::MpiCommunicator* g_comm = nullptr;

History Train(const GptConfig& config, const Mesh& mesh, Strategy strategy, const BatchSpec& batch,
              int steps) {
  Trainer trainer(config, Layout(mesh, strategy), TrainOptions{}, *g_comm);
  return TrainHistory(trainer, batch, steps, *g_comm);
}

struct Case {
  const char* mesh;
  Strategy strategy;
};

std::vector<Case> CasesFor(int world) {
  switch (world) {
    case 2:
      return {{"dp=2", {0, false}}, {"dp=2", {1, false}}, {"dp=2", {2, false}},
              {"dp=2", {3, false}}, {"tp=2", {0, false}}, {"tp=2", {0, true}}, {"sp=2", {0, false}}};
    case 4:
      return {{"dp=4", {2, false}}, {"tp=4", {0, true}}, {"dp=2,tp=2", {0, false}}, {"sp=4", {0, false}},
              {"tp=2,sp=2", {0, true}},
              {"dp=2,tp=2", {1, true}}, {"dp=2,tp=2", {3, true}}};
    case 8:
      return {{"dp=2,tp=4", {1, true}}, {"dp=4,tp=2", {3, false}}, {"dp=8", {2, false}},
              {"dp=2,tp=2,sp=2", {1, true}}, {"dp=2,sp=2,tp=2", {3, false}}};
    default:
      return {};
  }
}

TEST(TrainMpiTest, EveryLayoutTrainsLikeOneProcess) {
  const int world = runtime::WorldSize();
  ASSERT_TRUE(world == 2 || world == 4 || world == 8) << "run under mpirun -np 2, 4 or 8";
  const Mesh alone({1}, {g_comm->rank()}, {"dp"});
  for (const DType dtype : {DType::kFloat64, DType::kFloat32}) {
    GptConfig config;
    config.layers = 2;
    config.width = 12;
    config.heads = 3;
    config.vocab = 13;
    config.sequence = 6;
    config.mlp_ratio = 2;
    config.dtype = dtype;
    const BatchSpec batch{5, 6, 3};
    const int steps = 3;
    const History single = Train(config, alone, Strategy{}, batch, steps);
    std::vector<Case> cases = CasesFor(world);
    if (dtype == DType::kFloat32) cases = {cases.front(), cases.back()};  // CI time
    for (const Case& c : cases) {
      const std::string label = std::string(c.mesh) + " zero=" + std::to_string(c.strategy.zero_stage) +
                                " sp=" + std::to_string(c.strategy.sequence_parallel) + " " +
                                std::string(ToString(dtype));
      SCOPED_TRACE(label);
      const History parallel = Train(config, ParseNamedMesh(c.mesh), c.strategy, batch, steps);
      const std::string error =
          runtime::FirstError(dtype == DType::kFloat64 ? CompareHistories(parallel, single, 1e-9)
                                                    : CompareHistories(parallel, single, 1e-4, true));
      EXPECT_EQ(error, "");
    }
  }
}

}  // namespace
}  // namespace spmd::train

int main(int argc, char** argv) {
  return spmd::runtime::RunMpiTests(argc, argv, "",
                                    [](spmd::runtime::MpiCommunicator* c) { spmd::train::g_comm = c; });
}
