// Optimizer-state offload on the simulated device changes no bit of training, moves
// exactly the optimizer states each step, and lowers the device's peak memory.
//
// Generated cases (rapidcheck): a layout (DP, ZeRO-1/2/3, TP, TP with SP, a 2-d mesh with
// ZeRO-3 and SP) and a small model (1 to 3 layers, dropout on or off, float32 or float64, 1
// or 2 micro-batches, recompute on or off) train 2 AdamW steps on sim devices (rank r on
// sim:r) with and without --offload optimizer. Every step's loss and gradient norm and
// every final parameter must be bitwise equal; on every rank, each step must copy up and
// copy down exactly the bytes of AdamW's two moments as computed here from the
// parameters' shapes and their state layouts (LocalShape), plus with --offload params
// (ZeRO-3 layouts, chosen at random) the parameter shards under their storage layouts,
// and hold those bytes on the host between steps. Typed errors: offload on the host,
// with pipeline stages, and params without ZeRO-3.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/sim/sim.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "runtime/testing/sim_device_communicator.h"
#include "runtime/comm/thread_communicator.h"
#include "train/checkpoint.h"
#include "train/device_sim.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/offload.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

struct Case {
  std::string mesh;
  Strategy strategy;
};

void showValue(const Case& c, std::ostream& os) {
  os << c.mesh << " zero=" << c.strategy.zero_stage << " sp=" << c.strategy.sequence_parallel;
}

const Case kCases[] = {
    {"dp=2", {0, false}}, {"dp=2", {1, false}}, {"dp=2", {2, false}},       {"dp=2", {3, false}},
    {"tp=2", {0, false}}, {"tp=2", {0, true}},  {"dp=2,tp=2", {3, true}},
};

struct Run {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<double>> params;
};

// On rank `rank`, in bytes: AdamW's two moments of every parameter (`params` false: the
// local shape of each parameter under its state layout, twice) or the parameters' own
// shards (`params` true: under their storage layout).
int64_t ExpectedBytes(const Gpt& model, int64_t rank, bool params) {
  const Layout& layout = model.layout();
  const std::vector<int64_t> coord = *layout.mesh().CoordinateOf(rank);
  int64_t bytes = 0;
  for (const NamedParam& p : model.params()) {
    const Shape& shape = p.value.value().shape();
    const int r = static_cast<int>(shape.size());
    const DistAttr attr = params ? layout.Storage(p.role, r) : layout.State(p.role, r);
    int64_t n = 1;
    for (int64_t d : LocalShape(shape, attr, layout.mesh(), coord)) n *= d;
    bytes += (params ? 1 : 2) * n * ElementSize(model.config().dtype);
  }
  return bytes;
}

Run Train(const Case& c, const GptConfig& config, int micro, bool recompute, OffloadKind offload_kind) {
  const bool offload = offload_kind != OffloadKind::kNone;
  const bool params_too = offload_kind == OffloadKind::kParams;
  EnableSimTraining();
  const Mesh mesh = ParseNamedMesh(c.mesh);
  Run run;
  std::mutex mutex;
  runtime::nccl::RunSimDeviceRanks(mesh.size(), [&](runtime::Communicator& comm) {
    TrainOptions options;
    options.device = comm.device();
    options.micro_batches = micro;
    options.recompute = recompute;
    options.offload = offload_kind;
    Trainer trainer(config, Layout(mesh, c.strategy), options, comm);
    const int64_t state_bytes = ExpectedBytes(trainer.model(), comm.rank(), false);
    const int64_t param_bytes = params_too ? ExpectedBytes(trainer.model(), comm.rank(), true) : 0;
    EXPECT_EQ(trainer.optimizer().StateBytes(), state_bytes) << "rank " << comm.rank();
    std::vector<double> losses, norms;
    for (int s = 0; s < 2; ++s) {
      const StepStats stats = trainer.Step({4, 4, config.seed}, s, comm);
      losses.push_back(stats.loss);
      norms.push_back(stats.grad_norm);
      const int64_t moved = offload ? state_bytes + param_bytes : 0;
      EXPECT_EQ(stats.offload_to_device, moved) << "rank " << comm.rank() << " step " << s;
      EXPECT_EQ(stats.offload_to_host, moved) << "rank " << comm.rank() << " step " << s;
      if (offload) {
        EXPECT_EQ(trainer.offload()->counters().host_bytes, state_bytes) << "rank " << comm.rank();
        EXPECT_EQ(trainer.offload()->counters().param_host_bytes, param_bytes) << "rank " << comm.rank();
        for (const NamedParam& p : trainer.model().params()) {
          EXPECT_EQ(p.value.value().local().device().is_host(), params_too) << p.name;
        }
        // The moments are host tensors between steps.
        for (size_t i = 0; i < trainer.model().params().size(); ++i) {
          const runtime::DistTensor& m = trainer.optimizer().first_moment(i);
          const runtime::DistTensor& v = trainer.optimizer().second_moment(i);
          EXPECT_TRUE(m.local().device().is_host() && v.local().device().is_host()) << "parameter " << i;
        }
      }
    }
    std::vector<std::vector<double>> params = trainer.GatherParams(comm);
    std::lock_guard<std::mutex> lock(mutex);
    if (comm.rank() == 0) {
      run.losses = std::move(losses);
      run.grad_norms = std::move(norms);
      run.params = std::move(params);
    }
  });
  return run;
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

RC_GTEST_PROP(Offload, TrainsBitwiseTheSameAndMovesTheStates, ()) {
  const Case c = *rc::gen::elementOf(std::vector<Case>(std::begin(kCases), std::end(kCases)));
  GptConfig config;
  config.layers = *rc::gen::inRange<int64_t>(1, 4);
  config.width = 8;
  config.heads = 2;
  config.vocab = *rc::gen::inRange<int64_t>(7, 12);
  config.sequence = 4;
  config.mlp_ratio = 2;
  config.dtype = *rc::gen::element(DType::kFloat32, DType::kFloat64);
  config.dropout = *rc::gen::element(0.0, 0.2);
  config.seed = *rc::gen::inRange<uint64_t>(1, 1000);
  const int micro = *rc::gen::inRange(1, 3);
  const bool recompute = *rc::gen::arbitrary<bool>();
  // Parameters too where they are ZeRO-3 shards.
  const OffloadKind kind = c.strategy.zero_stage == 3 && *rc::gen::arbitrary<bool>() ? OffloadKind::kParams
                                                                                     : OffloadKind::kOptimizer;
  RC_TAG(ToString(kind));
  const Run plain = Train(c, config, micro, recompute, OffloadKind::kNone);
  const Run offloaded = Train(c, config, micro, recompute, kind);
  RC_ASSERT(plain.losses.size() == 2u);
  RC_ASSERT(SameBits(offloaded.losses, plain.losses));
  RC_ASSERT(SameBits(offloaded.grad_norms, plain.grad_norms));
  RC_ASSERT(offloaded.params.size() == plain.params.size());
  for (size_t i = 0; i < plain.params.size(); ++i) RC_ASSERT(SameBits(offloaded.params[i], plain.params[i]));
}

// The device's peak memory is lower with offload: the moments of all parameters stop
// being resident. Each test runs in its own process, and the sim's peak only grows: the
// offloaded run goes first, its peak read, then the plain run must raise it.
TEST(Offload, LowersTheDevicePeak) {
  GptConfig config;
  config.layers = 2;
  config.width = 32;
  config.heads = 2;
  config.vocab = 16;
  config.sequence = 4;
  config.dtype = DType::kFloat64;
  const Case c{"dp=2", {1, false}};
  Train(c, config, 1, false, OffloadKind::kOptimizer);
  const int64_t with_offload = kernels::sim::UsageOf(kernels::Device::Sim(0)).peak_bytes;
  Train(c, config, 1, false, OffloadKind::kNone);
  const int64_t without = kernels::sim::UsageOf(kernels::Device::Sim(0)).peak_bytes;
  EXPECT_GT(without, with_offload);
}

// A checkpoint saved between steps with everything offloaded (states and parameters on the
// host) and loaded into an offloaded trainer continues the same training: 1 + 2 steps
// equal 3 uninterrupted steps without offload, bit for bit.
TEST(Offload, CheckpointsSaveAndLoadOffloadedState) {
  GptConfig config;
  config.layers = 2;
  config.width = 8;
  config.heads = 2;
  config.vocab = 9;
  config.sequence = 4;
  config.dtype = DType::kFloat64;
  const Mesh mesh = ParseNamedMesh("dp=2");
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("offload_ckpt_" + std::to_string(getpid()))).string();
  std::vector<double> losses[2];
  std::vector<std::vector<double>> params[2];
  EnableSimTraining();
  for (int offloaded = 0; offloaded < 2; ++offloaded) {
    std::mutex mutex;
    runtime::nccl::RunSimDeviceRanks(2, [&](runtime::Communicator& comm) {
      TrainOptions options;
      options.device = comm.device();
      options.offload = offloaded ? OffloadKind::kParams : OffloadKind::kNone;
      const Layout layout(mesh, {3, false});
      std::vector<double> mine;
      std::vector<std::vector<double>> values;
      if (offloaded) {
        {
          Trainer first(config, layout, options, comm);
          mine.push_back(first.Step({4, 4, 2}, 0, comm).loss);
          SaveCheckpoint(first, dir, {1}, comm);
        }
        Trainer second(config, layout, options, comm);
        EXPECT_EQ(LoadCheckpoint(second, dir, comm), 1);
        for (int s = 1; s < 3; ++s) mine.push_back(second.Step({4, 4, 2}, s, comm).loss);
        values = second.GatherParams(comm);
      } else {
        Trainer trainer(config, layout, options, comm);
        for (int s = 0; s < 3; ++s) mine.push_back(trainer.Step({4, 4, 2}, s, comm).loss);
        values = trainer.GatherParams(comm);
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.rank() == 0) {
        losses[offloaded] = std::move(mine);
        params[offloaded] = std::move(values);
      }
    });
  }
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(SameBits(losses[1], losses[0]));
  ASSERT_EQ(params[1].size(), params[0].size());
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(SameBits(params[1][i], params[0][i])) << "parameter " << i;
}

std::string FieldOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SpmdError& e) {
    return e.field();
  }
  return "(no error)";
}

TEST(Offload, RefusedOnTheHostAndWithPipelineStages) {
  GptConfig config;
  config.layers = 2;
  config.width = 8;
  config.heads = 2;
  config.vocab = 8;
  config.sequence = 4;
  TrainOptions options;
  options.offload = OffloadKind::kOptimizer;
  runtime::RunRanks(1, [&](runtime::Communicator& comm) {
    EXPECT_EQ(FieldOf([&] { Trainer(config, Layout(ParseNamedMesh("dp=1"), {}), options, comm); }),
              "options.offload");
  });
  EnableSimTraining();
  runtime::nccl::RunSimDeviceRanks(2, [&](runtime::Communicator& comm) {
    TrainOptions on_device = options;
    on_device.device = comm.device();
    EXPECT_EQ(FieldOf([&] {
                PipelineTrainer(config, ParseNamedMesh("pp=2"), {}, on_device, PipelineOptions{}, comm);
              }),
              "options.offload");
    // Parameters are offloaded as ZeRO-3 shards only.
    on_device.offload = OffloadKind::kParams;
    EXPECT_EQ(FieldOf([&] { Trainer(config, Layout(ParseNamedMesh("dp=2"), {2, false}), on_device, comm); }),
              "options.offload");
  });
  EXPECT_EQ(FieldOf([] { ParseOffload("disk", "--offload"); }), "--offload");
  EXPECT_EQ(ParseOffload("optimizer", "--offload"), OffloadKind::kOptimizer);
  EXPECT_EQ(ParseOffload("params", "--offload"), OffloadKind::kParams);
}

}  // namespace
}  // namespace spmd::train
