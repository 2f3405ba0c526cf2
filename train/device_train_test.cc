// Training on the simulated device (kernels/sim/sim.h) equals training on the host.
//
// Every rank's parameters, gradients, optimizer states, activations and tokens live on its
// sim device (rank r on sim:r % 8, RunSimDeviceRanks: the NCCL backend's plans over a
// simulated NCCL on device buffers). The sim runs work asynchronously on stream workers,
// refuses typed host reads of device memory and poisons fresh memory, so a host read that
// skipped a synchronization, a tensor left on the host or memory used before it was written
// fails here. For each layout (DP, ZeRO-1/2/3, TP, SP with dense attention, and 2-d
// meshes) the small GPT trains 3 AdamW steps with clipping and dropout; the loss of every
// step and every parameter after the last step must equal the one-rank host run to 1e-9
// relative (float64).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/sim/sim.h"
#include "train/device_train_test_util.h"

namespace spmd::train {
namespace {

TEST(DeviceTrainTest, EveryLayoutOnSimDevicesTrainsLikeOneHostProcess) {
  const GptConfig config = DeviceTestConfig();
  const BatchSpec batch{3, 5, 7};  // batch 3: uneven over dp = 2
  const int steps = 3;
  const History host = Train(OnHost, config, "dp=1", Strategy{}, batch, steps);
  ASSERT_EQ(host.losses.size(), 3u);
  EXPECT_TRUE(host.device.is_host());
  EXPECT_LT(host.losses[2], host.losses[0]);  // it learns
  struct Case {
    const char* mesh;
    Strategy strategy;
  };
  const Case cases[] = {
      {"dp=1", {0, false}},      {"dp=2", {0, false}},      {"dp=2", {1, false}},
      {"dp=2", {2, false}},      {"dp=2", {3, false}},      {"tp=2", {0, false}},
      {"tp=2", {0, true}},       {"sp=2", {0, false}},      {"dp=2,tp=2", {3, true}},
      {"dp=2,sp=2", {2, false}}, {"dp=2,tp=2,sp=2", {1, true}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.mesh) + " zero=" + std::to_string(c.strategy.zero_stage) +
                 " sp=" + std::to_string(c.strategy.sequence_parallel));
    const History sim = Train(OnSim, config, c.mesh, c.strategy, batch, steps);
    EXPECT_EQ(sim.device.kind, kernels::DeviceKind::kSim);
    ExpectSame(sim, host, 1e-9);
  }
}

TEST(DeviceTrainTest, Float32OnSimEqualsFloat32OnHost) {
  GptConfig config = DeviceTestConfig();
  config.dtype = DType::kFloat32;
  config.layers = 1;
  const BatchSpec batch{4, 5, 3};
  const History host = Train(OnHost, config, "dp=2,tp=2", Strategy{1, true}, batch, 2);
  const History sim = Train(OnSim, config, "dp=2,tp=2", Strategy{1, true}, batch, 2);
  ExpectSame(sim, host, 1e-5);
}

// Pipeline stages on sim devices: activations and their gradients sent and received as
// device buffers, the loss summed over the stages on a device buffer. Every rank's losses,
// gradient norms and gathered stage parameters equal the same pipeline on host thread
// ranks to 1e-9 (float64); pp=2,dp=2 with 1F1B and interleaved (2 chunks), ZeRO-1.
TEST(DeviceTrainTest, PipelineOnSimDevicesTrainsLikeTheHostPipeline) {
  GptConfig config = DeviceTestConfig();
  config.layers = 4;
  config.dropout = 0;
  const BatchSpec batch{5, 5, 3};
  for (const PipelineOptions& pipeline : {PipelineOptions{ScheduleKind::kOneFOneB, 1},
                                          PipelineOptions{ScheduleKind::kInterleaved, 2}}) {
    SCOPED_TRACE(std::string(ToString(pipeline.schedule)));
    std::vector<History> host, sim;
    TrainPipeline(OnHost, config, "pp=2,dp=2", pipeline, 2, batch, 3, &host);
    TrainPipeline(OnSim, config, "pp=2,dp=2", pipeline, 2, batch, 3, &sim);
    ASSERT_EQ(host.size(), 4u);
    for (size_t r = 0; r < host.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(sim[r].device.kind, kernels::DeviceKind::kSim);
      ExpectSame(sim[r], host[r], 1e-9);
    }
  }
}

// Checkpoints of device tensors: 2 steps on sim dp=2,tp=2 (ZeRO-1, SP), saved (shards
// read back through ToHostTensor, the agreement collectives on device buffers); 2 more
// loaded on sim dp=4 (ZeRO-3), on sim dp=1 and on the host: each equals 4 uninterrupted
// steps on one host process.
TEST(DeviceTrainTest, CheckpointsOfSimTensorsMoveBetweenLayoutsAndDevices) {
  GptConfig config = DeviceTestConfig();
  config.layers = 1;
  config.dropout = 0;
  const BatchSpec batch{4, 5, 11};
  const std::string dir = ::testing::TempDir() + "spmd_device_checkpoint_" + std::to_string(::getpid());
  const History whole = Train(OnHost, config, "dp=1", Strategy{}, batch, 4);
  const History first = Train(OnSim, config, "dp=2,tp=2", Strategy{1, true}, batch, 2, 0, "", dir);
  struct Then {
    Runner run;
    const char* mesh;
    Strategy strategy;
  };
  for (const Then& then : {Then{OnSim, "dp=4", Strategy{3, false}}, Then{OnSim, "dp=1", Strategy{}},
                           Then{OnHost, "dp=2", Strategy{2, false}}}) {
    SCOPED_TRACE(then.mesh);
    const History second = Train(then.run, config, then.mesh, then.strategy, batch, 2, 2, dir);
    History joined = second;
    joined.losses.insert(joined.losses.begin(), first.losses.begin(), first.losses.end());
    joined.grad_norms.insert(joined.grad_norms.begin(), first.grad_norms.begin(), first.grad_norms.end());
    ExpectSame(joined, whole, 1e-9);
  }
  std::filesystem::remove_all(dir);
}

// The communicator's buffers and TrainOptions::device must agree: a host communicator
// with a sim device (and a sim one with the host) is InvalidArgument naming the option.
TEST(DeviceTrainTest, DeviceAndCommunicatorMustAgree) {
  EnableSimTraining();
  const GptConfig config = DeviceTestConfig();
  auto error = [&](const Runner& run, kernels::Device device) -> std::string {
    try {
      run(1, [&](runtime::Communicator& comm) {
        TrainOptions options;
        options.device = device;
        Trainer trainer(config, Layout(ParseNamedMesh("dp=1"), Strategy{}), options, comm);
      });
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(OnHost, kernels::Device::Sim(0)).find("options.device"), std::string::npos);
  EXPECT_NE(error(OnSim, kernels::Device::Host()).find("options.device"), std::string::npos);
  EXPECT_EQ(error(OnSim, kernels::Device::Sim(0)), "");
}

// Ulysses, ring and zigzag ring attention over sp=2 (the block ops through Dispatch on
// the sim devices, the ring's device buffers sent and received, Ulysses' all-to-alls by
// the reshard executor) train like the same strategy on host thread ranks, and like one
// host process (zigzag: the same model in natural order), to 1e-9.
TEST(DeviceTrainTest, SequenceAttentionOnSimDevicesTrainsLikeTheHost) {
  GptConfig config = DeviceTestConfig();
  config.dropout = 0;  // zigzag reorders the sequence: no dropout with it
  config.heads = 4;    // a multiple of sp for Ulysses
  config.width = 16;
  config.sequence = 8;  // a multiple of 2 x sp for zigzag
  const BatchSpec batch{2, 8, 7};
  const History one = Train(OnHost, config, "dp=1", Strategy{}, batch, 2);
  for (AttentionKind kind : {AttentionKind::kUlysses, AttentionKind::kRing, AttentionKind::kRingZigzag}) {
    SCOPED_TRACE(static_cast<int>(kind));
    config.attention = kind;
    const History host = Train(OnHost, config, "sp=2", Strategy{}, batch, 2);
    const History sim = Train(OnSim, config, "sp=2", Strategy{}, batch, 2);
    EXPECT_EQ(sim.device.kind, kernels::DeviceKind::kSim);
    ExpectSame(sim, host, 1e-9);
    ExpectSame(sim, one, 1e-9);
  }
}

// The one door between device and host memory: ReadScalar synchronizes before it reads
// (the sim runs queued work only when a synchronizing call needs it, so a read without the
// sync would see the poison), and ParseDevice names the field.
TEST(DeviceTrainTest, ReadScalarAndParseDevice) {
  EnableSimTraining();
  const kernels::Device sim = kernels::Device::Sim(1);
  const kernels::Tensor host = kernels::Tensor::FromVector({3}, std::vector<double>{1.5, -2, 4});
  const kernels::Tensor device = OnDevice(host, sim, kernels::sim::NewStream(sim));
  EXPECT_EQ(device.device(), sim);
  EXPECT_EQ(ReadScalar(device, 1), -2.0);
  EXPECT_EQ(ReadScalar(host, 2), 4.0);
  EXPECT_THROW(ReadScalar(device, 3), SpmdError);
  EXPECT_EQ(ParseDevice("sim", 9, "--device"), kernels::Device::Sim(1));
  EXPECT_TRUE(ParseDevice("cpu", 0, "--device").is_host());
  try {
    ParseDevice("tpu", 0, "--device");
    ADD_FAILURE() << "tpu accepted";
  } catch (const SpmdError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--device", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace spmd::train
