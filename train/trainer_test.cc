// The trainers' guards and evaluation (thread ranks, float64): a non-finite loss or
// gradient norm is a NonFiniteError naming the step on every rank alike, in the Trainer
// and in the PipelineTrainer; Evaluate is the forward of Step, with no update.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "runtime/comm/thread_communicator.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

GptConfig SmallConfig() {
  GptConfig config;
  config.layers = 2;
  config.width = 8;
  config.heads = 2;
  config.vocab = 11;
  config.sequence = 4;
  config.mlp_ratio = 2;
  return config;
}

// What each rank's run ended with: the error's text and step, or none.
struct Outcome {
  std::optional<std::string> error;
  int64_t step = -1;
};

// Runs `body` on the ranks of `mesh_text`, catching a NonFiniteError per rank.
template <typename Body>
std::vector<Outcome> OnRanks(const std::string& mesh_text, Body body) {
  const Mesh mesh = ParseNamedMesh(mesh_text);
  std::vector<Outcome> outcomes(mesh.size());
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    Outcome outcome;
    try {
      body(mesh, comm);
    } catch (const NonFiniteError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      outcome.error = e.what();
      outcome.step = e.step();
    }
    std::lock_guard<std::mutex> lock(mutex);
    outcomes[comm.rank()] = outcome;
  });
  return outcomes;
}

void SetFirstElement(const Variable& param, double value) {
  runtime::DistTensor t = param.value();
  if (t.has_local() && t.local().numel() > 0) t.local().data<double>()[0] = value;
  param.SetValue(t);
}

// A NaN (or infinite) parameter makes the next step's loss non-finite: every rank throws
// the same error naming that step, and the update is not applied (the other parameters
// keep their values).
TEST(TrainerGuardTest, NonFiniteParameterStopsTheStepOnEveryRank) {
  for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    for (const char* mesh : {"dp=1", "dp=2", "dp=2,tp=2"}) {
      SCOPED_TRACE(std::string(mesh) + " " + std::to_string(bad));
      std::vector<std::vector<double>> before(4), after(4);
      const std::vector<Outcome> outcomes = OnRanks(mesh, [&](const Mesh& m, runtime::Communicator& comm) {
        Trainer trainer(SmallConfig(), Layout(m, Strategy{}), TrainOptions{}, comm);
        const BatchSpec batch{4, 4, 3};
        trainer.Step(batch, 0, comm);
        trainer.Step(batch, 1, comm);
        SetFirstElement(trainer.model().params()[0].value, bad);  // the embedding
        before[comm.rank()] = trainer.GatherParams(comm).back();
        try {
          trainer.Step(batch, 2, comm);
        } catch (const NonFiniteError&) {
          after[comm.rank()] = trainer.GatherParams(comm).back();
          throw;
        }
      });
      for (size_t r = 0; r < outcomes.size(); ++r) {
        ASSERT_TRUE(outcomes[r].error) << "rank " << r << " trained on";
        // An infinite embedding gives inf - inf in the norm: nan too.
        EXPECT_EQ(*outcomes[r].error, "step 2: loss is nan") << "rank " << r;
        EXPECT_EQ(outcomes[r].step, 2);
        EXPECT_EQ(after[r], before[r]) << "rank " << r << ": the update was applied";
      }
    }
  }
}

// A learning rate far too large diverges: some step's loss or gradient norm is not finite,
// and every rank (of a plain and of a pipeline trainer) stops at the same step saying so.
TEST(TrainerGuardTest, DivergenceStopsEveryRankAtTheSameStep) {
  TrainOptions options;
  options.lr = 1e30;
  GptConfig config = SmallConfig();
  config.dtype = DType::kFloat32;  // as spmd-train: squares of 1e30 overflow
  const BatchSpec batch{4, 4, 5};
  const std::regex message("step ([0-9]+): (loss|gradient norm) is (nan|inf|-inf)");
  auto check = [&](const std::vector<Outcome>& outcomes) {
    ASSERT_TRUE(outcomes[0].error) << "trained 8 steps at lr 1e30";
    std::smatch match;
    ASSERT_TRUE(std::regex_match(*outcomes[0].error, match, message)) << *outcomes[0].error;
    EXPECT_EQ(match[1].str(), std::to_string(outcomes[0].step));
    for (size_t r = 1; r < outcomes.size(); ++r) {
      ASSERT_TRUE(outcomes[r].error) << "rank " << r;
      EXPECT_EQ(*outcomes[r].error, *outcomes[0].error) << "rank " << r;
    }
  };
  check(OnRanks("dp=2,tp=2", [&](const Mesh& m, runtime::Communicator& comm) {
    Trainer trainer(config, Layout(m, Strategy{1, false}), options, comm);
    for (int64_t step = 0; step < 8; ++step) trainer.Step(batch, step, comm);
  }));
  TrainOptions pipeline_options = options;
  pipeline_options.micro_batches = 2;
  check(OnRanks("pp=2,dp=2", [&](const Mesh& m, runtime::Communicator& comm) {
    PipelineTrainer trainer(config, m, Strategy{}, pipeline_options, PipelineOptions{}, comm);
    for (int64_t step = 0; step < 8; ++step) trainer.Step(batch, step, comm);
  }));
}

// Evaluate is Step's forward: on the batch of step 0 it gives the loss Step reports, twice
// alike (it updates nothing), on one rank and on a 2-d layout.
TEST(TrainerEvaluateTest, IsTheStepsLossWithoutAnUpdate) {
  const BatchSpec batch{4, 4, 9};
  for (const char* mesh : {"dp=1", "dp=2,tp=2"}) {
    SCOPED_TRACE(mesh);
    OnRanks(mesh, [&](const Mesh& m, runtime::Communicator& comm) {
      Trainer trainer(SmallConfig(), Layout(m, Strategy{}), TrainOptions{}, comm);
      kernels::Tensor tokens, labels;
      MakeBatch(batch, SmallConfig().vocab, 0, &tokens, &labels);
      const double first = trainer.Evaluate(tokens, labels, 0, comm);
      const double again = trainer.Evaluate(tokens, labels, 0, comm);
      const double stepped = trainer.Step(batch, 0, comm).loss;
      EXPECT_EQ(first, again);
      EXPECT_NEAR(first, stepped, 1e-12 * std::abs(stepped));
      EXPECT_NE(trainer.Evaluate(tokens, labels, 1, comm), first);  // the update changed the model
    });
  }
}

TEST(TrainerEvaluateTest, RefusesDropout) {
  GptConfig config = SmallConfig();
  config.dropout = 0.1;
  OnRanks("dp=1", [&](const Mesh& m, runtime::Communicator& comm) {
    Trainer trainer(config, Layout(m, Strategy{}), TrainOptions{}, comm);
    kernels::Tensor tokens, labels;
    MakeBatch(BatchSpec{2, 4, 1}, config.vocab, 0, &tokens, &labels);
    try {
      trainer.Evaluate(tokens, labels, 0, comm);
      ADD_FAILURE() << "evaluated with dropout";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "config.dropout");
    }
  });
}

}  // namespace
}  // namespace spmd::train
