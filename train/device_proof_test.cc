// The proof on simulated devices at np 2, 4 and 8: every strategy proven on the host
// trains on sim devices (every rank's tensors on its sim device, the NCCL backend's plans
// over a simulated NCCL, in-process: RunSimDeviceRanks) exactly as it does on host thread
// ranks. Float64 to 1e-9 relative; float32 to 1e-5 (the same kernels run on both, so only
// the order of the collectives' float32 sums may differ; spmd-train --verify's float32
// bound against one process is 1e-3).
//
//   DataParallelAndZero  dp=np with ZeRO 0-3: each equals one host process.
//   TensorAndSequence    tp=np (with and without Megatron SP), sp=np (the sequence axis),
//                        and a mixed mesh: each equals one host process.
//   PipelineSchedules    gpipe, 1f1b and interleaved: every rank equals the same pipeline
//                        on host ranks (pipeline_test proves that equals one process).
//   Cfg                  the guided denoising steps on [2, np/2]: equal the sequential
//                        steps on one host rank.
//   CheckpointResume     saved on sim at np, resumed on sim at another np with another
//                        layout: equals uninterrupted steps on one host process.
//   Float32              dp x tp with ZeRO-1 and SP in float32: equals the host run.
// (Join on sim: train/join_test.cc, np 1-4 generated and np 8.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "rules/model/layout.h"
#include "train/cfg.h"
#include "train/device_train_test_util.h"

namespace spmd::train {
namespace {

GptConfig ProofConfig() {
  GptConfig config;
  config.layers = 1;
  config.width = 16;
  config.heads = 4;
  config.vocab = 13;
  config.sequence = 8;  // sp = 8: one position per rank
  config.mlp_ratio = 2;
  config.dropout = 0.1;
  config.dtype = DType::kFloat64;
  return config;
}

const BatchSpec kBatch{8, 8, 5};  // dp = 8: one row per rank

class SimProof : public ::testing::TestWithParam<int> {};

struct Case {
  std::string mesh;
  Strategy strategy;
};

void ExpectEveryCaseLikeOneHostProcess(const std::vector<Case>& cases) {
  const GptConfig config = ProofConfig();
  const History host = Train(OnHost, config, "dp=1", Strategy{}, kBatch, 3);
  ASSERT_LT(host.losses[2], host.losses[0]);  // it learns
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mesh + " zero=" + std::to_string(c.strategy.zero_stage) +
                 (c.strategy.sequence_parallel ? " sp" : ""));
    const History sim = Train(OnSim, config, c.mesh, c.strategy, kBatch, 3);
    EXPECT_EQ(sim.device.kind, kernels::DeviceKind::kSim);
    ExpectSame(sim, host, 1e-9);
  }
}

TEST_P(SimProof, DataParallelAndZero) {
  const std::string dp = "dp=" + std::to_string(GetParam());
  ExpectEveryCaseLikeOneHostProcess({{dp, {0, false}}, {dp, {1, false}}, {dp, {2, false}}, {dp, {3, false}}});
}

TEST_P(SimProof, TensorAndSequence) {
  const int np = GetParam();
  const std::string n = std::to_string(np);
  std::vector<Case> cases = {{"tp=" + n, {0, false}}, {"tp=" + n, {0, true}}, {"sp=" + n, {0, false}}};
  if (np == 4) cases.push_back({"dp=2,tp=2", {3, true}});
  if (np == 8) cases.push_back({"dp=2,tp=2,sp=2", {3, true}});
  ExpectEveryCaseLikeOneHostProcess(cases);
}

TEST_P(SimProof, PipelineSchedules) {
  const int np = GetParam();
  GptConfig config = ProofConfig();
  config.layers = 4;
  config.dropout = 0;
  struct Run {
    PipelineOptions pipeline;
    std::string mesh;
  };
  // pp over as many ranks as the layers allow; the rest data (and tensor) parallel.
  const std::string deep = np == 2 ? "pp=2" : np == 4 ? "pp=4" : "pp=4,dp=2";
  const std::string interleaved = np == 2 ? "pp=2" : np == 4 ? "pp=2,dp=2" : "pp=2,dp=2,tp=2";
  for (const Run& run : {Run{{ScheduleKind::kFillDrain, 1}, deep}, Run{{ScheduleKind::kOneFOneB, 1}, deep},
                         Run{{ScheduleKind::kInterleaved, 2}, interleaved}}) {
    SCOPED_TRACE(std::string(ToString(run.pipeline.schedule)) + " on " + run.mesh);
    std::vector<History> host, sim;
    TrainPipeline(OnHost, config, run.mesh, run.pipeline, 4, kBatch, 2, &host);
    TrainPipeline(OnSim, config, run.mesh, run.pipeline, 4, kBatch, 2, &sim);
    ASSERT_EQ(host.size(), static_cast<size_t>(np));
    for (size_t r = 0; r < host.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(sim[r].device.kind, kernels::DeviceKind::kSim);
      EXPECT_FALSE(host[r].params.empty());
      ExpectSame(sim[r], host[r], 1e-9);
    }
  }
}

// x after the guided steps, on every rank (global, read through ToHostTensor).
std::vector<std::vector<double>> GuidedSteps(const Runner& run, int64_t m, const DenoiserConfig& config,
                                             const kernels::Tensor& x0, const kernels::Tensor& cond0,
                                             const std::vector<GuidedStep>& steps, bool parallel) {
  const int64_t world = parallel ? 2 * m : 1;
  std::vector<std::vector<double>> out(static_cast<size_t>(world));
  std::mutex mutex;
  run(world, [&](runtime::Communicator& comm) {
    const Mesh mesh({2, m});
    const Mesh on = parallel ? mesh.SubMesh(*mesh.CoordinateOf(comm.rank()), {1}) : Mesh({1});
    const DistAttr rows = parallel ? ParsePlacementString("[S(0)]", 2, "x") : DistAttr::Replicated(2);
    const DistAttr ids = parallel ? ParsePlacementString("[S(0)]", 1, "cond") : DistAttr::Replicated(1);
    const Denoiser model(config, on, comm.rank(), comm.device(), comm.stream());
    runtime::DistTensor x =
        OnDevice(runtime::DistTensor::ShardTensor(x0, on, rows, comm.rank()), comm.device(), comm.stream());
    const runtime::DistTensor cond =
        OnDevice(runtime::DistTensor::ShardTensor(cond0, on, ids, comm.rank()), comm.device(), comm.stream());
    for (const GuidedStep& step : steps) {
      x = parallel ? GuidedStepCfgParallel(model, mesh, x, cond, step, comm)
                   : GuidedStepSequential(model, x, cond, step, comm);
    }
    const kernels::Tensor g = ToHostTensor(*x.ToGlobal(comm));
    std::lock_guard<std::mutex> lock(mutex);
    out[static_cast<size_t>(comm.rank())].assign(g.data<double>(), g.data<double>() + g.numel());
    EXPECT_EQ(x.local().device().kind, comm.device().kind);
  });
  return out;
}

TEST_P(SimProof, Cfg) {
  const int64_t m = GetParam() / 2;
  DenoiserConfig config;
  config.features = 5;
  config.classes = 3;
  config.embed = 3;
  config.hidden = 7;
  const int64_t batch = 2 * m + 1;  // uneven over m
  std::vector<double> x;
  std::vector<int64_t> cond;
  for (int64_t i = 0; i < batch * config.features; ++i) x.push_back(std::sin(0.7 * static_cast<double>(i)));
  for (int64_t i = 0; i < batch; ++i) cond.push_back(i % config.classes);
  const kernels::Tensor x0 = kernels::Tensor::FromVector({batch, config.features}, x);
  const kernels::Tensor c0 = kernels::Tensor::FromVector({batch}, cond);
  const std::vector<GuidedStep> steps = {{4.0, 1.0, 0.95, -0.1}, {2.5, 0.5, 0.97, -0.15}};
  const std::vector<double> want = GuidedSteps(OnHost, m, config, x0, c0, steps, false)[0];
  const auto got = GuidedSteps(OnSim, m, config, x0, c0, steps, true);
  ASSERT_EQ(got.size(), static_cast<size_t>(2 * m));
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want.size()) << "rank " << r;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[r][i], want[i], 1e-9 * scale) << "rank " << r << " x[" << i << "]";
    }
  }
}

TEST_P(SimProof, CheckpointResume) {
  const int np = GetParam();
  GptConfig config = ProofConfig();
  config.dropout = 0;
  // Saved at np with one layout, resumed at the next np (2 -> 4 -> 8 -> 2) with another.
  struct Layouts {
    const char* save;
    Strategy save_strategy;
    const char* resume;
    Strategy resume_strategy;
  };
  const Layouts l = np == 2   ? Layouts{"dp=2", {2, false}, "dp=2,tp=2", {3, true}}
                    : np == 4 ? Layouts{"dp=2,tp=2", {1, true}, "dp=2,tp=2,sp=2", {3, true}}
                              : Layouts{"dp=2,tp=2,sp=2", {3, true}, "tp=2", {0, false}};
  const std::string dir = ::testing::TempDir() + "spmd_sim_proof_" + std::to_string(np) + "_" +
                          std::to_string(::getpid());
  const History whole = Train(OnHost, config, "dp=1", Strategy{}, kBatch, 4);
  const History first = Train(OnSim, config, l.save, l.save_strategy, kBatch, 2, 0, "", dir);
  const History second = Train(OnSim, config, l.resume, l.resume_strategy, kBatch, 2, 2, dir);
  History joined = second;
  joined.losses.insert(joined.losses.begin(), first.losses.begin(), first.losses.end());
  joined.grad_norms.insert(joined.grad_norms.begin(), first.grad_norms.begin(), first.grad_norms.end());
  EXPECT_EQ(second.device.kind, kernels::DeviceKind::kSim);
  ExpectSame(joined, whole, 1e-9);
  std::filesystem::remove_all(dir);
}

TEST_P(SimProof, Float32) {
  const int np = GetParam();
  GptConfig config = ProofConfig();
  config.dtype = DType::kFloat32;
  const std::string mesh = np == 2 ? "tp=2" : "dp=" + std::to_string(np / 2) + ",tp=2";
  const History host = Train(OnHost, config, mesh, Strategy{1, true}, kBatch, 2);
  const History sim = Train(OnSim, config, mesh, Strategy{1, true}, kBatch, 2);
  ExpectSame(sim, host, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Np, SimProof, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace spmd::train
