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

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/mpi_communicator.h"
#include "runtime/mpi_test_main.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

runtime::MpiCommunicator* g_comm = nullptr;

struct History {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;
};

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
  History h;
  for (int s = 0; s < steps; ++s) h.losses.push_back(trainer.Step(batch, s, *g_comm).loss);
  const auto values = trainer.GatherParams(*g_comm);
  for (size_t i = 0; i < values.size(); ++i) h.params[trainer.model().params()[i].name] = values[i];
  return h;
}

// "" when equal within 1e-9; else the first difference (FirstError adds the rank).
std::string Compare(const History& got, const History& want) {
  std::ostringstream os;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    if (!(std::abs(got.losses[s] - want.losses[s]) <= 1e-9 * std::abs(want.losses[s]))) {
      os << "step " << s << " loss " << got.losses[s] << " vs " << want.losses[s];
      return os.str();
    }
  }
  for (const auto& [name, values] : got.params) {
    const auto it = want.params.find(name);
    if (it == want.params.end() || it->second.size() != values.size()) {
      os << "parameter " << name << " is not the model's";
      return os.str();
    }
    double scale = 1e-3;
    for (double v : it->second) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < values.size(); ++k) {
      if (!(std::abs(values[k] - it->second[k]) <= 1e-9 * scale)) {
        os << "parameter " << name << " element " << k << ": " << values[k] << " vs "
           << it->second[k];
        return os.str();
      }
    }
  }
  return "";
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
      std::string error = Compare(got, alone[m]);
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
