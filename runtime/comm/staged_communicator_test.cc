// The staged communicator (runtime/comm/staged_communicator.h) on thread ranks with sim device
// buffers: every collective and point to point (box forms too) equals the thread backend
// bit for bit, with the same counters; Dispatch and resharding on sim tensors through it
// equal the CPU; a send buffer still being written on another stream is a CommError
// naming the rank and the step.
#include "runtime/comm/staged_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/sim/sim.h"
#include "rules/engine/registry.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/testing/device_communicator_test_util.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using testing::Collectives;
using testing::DispatchAndGather;
using testing::Iota;
using testing::Parse;
using testing::Place;
using testing::Quick;
using testing::SameBytes;
using testing::Values;

// Point to point with boxes: rank r sends the box [1:3, 2:5] of a 4x6 array to r + 1, which
// receives it into the box [1:3, 1:4] of its own 3x4 array (the rest left as it was).
std::vector<Tensor> Boxes(const Place& at) {
  Communicator& comm = at.comm;
  const int64_t w = comm.world_size(), r = comm.rank();
  const Tensor s = at.Put(Values(r, 24, DType::kFloat64));
  Tensor z = at.Put(Values(r + 7, 12, DType::kFloat64));
  comm.SendBox(s.bytes(), BufferBox{{4, 6}, {1, 2}, {2, 3}}, DType::kFloat64, (r + 1) % w);
  comm.RecvBox(z.bytes(), BufferBox{{3, 4}, {1, 1}, {2, 3}}, DType::kFloat64, (r + w - 1) % w);
  comm.Synchronize();
  return {at.Get(z)};
}

// Rank r's stream on sim:r (made once: streams live as long as the process).
kernels::Stream StreamOf(int64_t rank) {
  static std::mutex mu;
  static auto* streams = new std::map<int64_t, kernels::Stream>;
  std::lock_guard<std::mutex> lock(mu);
  auto found = streams->find(rank);
  if (found == streams->end()) {
    found = streams->emplace(rank, kernels::sim::NewStream(kernels::Device::Sim(static_cast<int>(rank % 8)))).first;
  }
  return found->second;
}

struct Outcome {
  std::vector<std::vector<Tensor>> results;
  std::vector<CommCounters> counters;
};

// fn on `world` thread ranks (host buffers), or on the same thread ranks each wrapped in a
// StagedCommunicator with its buffers on sim:r.
Outcome OnRanks(int64_t world, bool staged, const std::function<std::vector<Tensor>(const Place&)>& fn) {
  Outcome out;
  out.results.resize(static_cast<size_t>(world));
  out.counters.resize(static_cast<size_t>(world));
  std::mutex mu;
  RunRanks(world, [&](Communicator& host) {
    std::vector<Tensor> mine;
    CommCounters counters;
    if (staged) {
      kernels::sim::EnableSim();
      StagedCommunicator comm(host, kernels::Device::Sim(static_cast<int>(host.rank() % 8)), StreamOf(host.rank()),
                              SimHostStaging());
      mine = fn(Place{comm, true});
      counters = comm.counters();
    } else {
      mine = fn(Place{host, false});
      counters = host.counters();
    }
    std::lock_guard<std::mutex> lock(mu);
    out.results[static_cast<size_t>(host.rank())] = std::move(mine);
    out.counters[static_cast<size_t>(host.rank())] = counters;
  }, Quick());
  return out;
}

void ExpectSame(const Outcome& staged, const Outcome& cpu) {
  ASSERT_EQ(staged.results.size(), cpu.results.size());
  for (size_t r = 0; r < cpu.results.size(); ++r) {
    ASSERT_EQ(staged.results[r].size(), cpu.results[r].size());
    ASSERT_FALSE(cpu.results[r].empty());
    for (size_t i = 0; i < cpu.results[r].size(); ++i) {
      EXPECT_TRUE(SameBytes(staged.results[r][i], cpu.results[r][i])) << "rank " << r << " result " << i;
    }
    for (int k = 0; k < kNumCollectives; ++k) {
      EXPECT_EQ(staged.counters[r].per_kind[k], cpu.counters[r].per_kind[k]) << "rank " << r << " kind " << k;
    }
  }
}

class StagedRanks : public ::testing::TestWithParam<int64_t> {};

TEST_P(StagedRanks, CollectivesOnStagedSimBuffersEqualTheCpu) {
  ExpectSame(OnRanks(GetParam(), true, Collectives), OnRanks(GetParam(), false, Collectives));
}

TEST_P(StagedRanks, BoxesOnStagedSimBuffersEqualTheCpu) {
  ExpectSame(OnRanks(GetParam(), true, Boxes), OnRanks(GetParam(), false, Boxes));
}

INSTANTIATE_TEST_SUITE_P(Worlds, StagedRanks, ::testing::Values(2, 3, 4));

TEST(StagedDispatch, DispatchAndReshardOnStagedSimTensorsEqualTheCpu) {
  ExpectSame(OnRanks(2, true, DispatchAndGather), OnRanks(2, false, DispatchAndGather));
}

// A send buffer written on another stream with no event wait: the staging finds the write
// pending (the sim's deferred schedule runs it only when a synchronizing call needs it), so
// the call fails naming the rank and the step, and the world ends (no rank hangs).
TEST(StagedFailure, SendBufferStillBeingWrittenIsCaught) {
  std::string message;
  try {
    OnRanks(2, true, [](const Place& at) {
      const kernels::Device device = at.comm.device();
      const kernels::Stream other = kernels::sim::NewStream(device);
      Tensor x = Tensor::Uninitialized({8}, DType::kFloat64, kernels::BackendFor(device).AllocatorFor(device), other);
      kernels::BackendFor(device).Fill(x.bytes(), 8, DType::kFloat64, 1.0, other);
      Tensor y = at.Empty({8}, DType::kFloat64);
      at.comm.AllReduce(x.bytes(), y.bytes(), 8, DType::kFloat64, ReduceOp::kSum, Group{0, 1});
      kernels::BackendFor(device).Synchronize(other);
      return std::vector<Tensor>{at.Get(y)};
    });
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank "), std::string::npos) << message;
  EXPECT_NE(message.find("step 1"), std::string::npos) << message;
  EXPECT_NE(message.find("all_reduce"), std::string::npos) << message;
}

TEST(StagedFailure, HostCommunicatorAndDeviceAreChecked) {
  RunRanks(1, [](Communicator& host) {
    EXPECT_THROW(StagedCommunicator(host, kernels::Device::Host(), {}, SimHostStaging()), SpmdError);
  }, Quick());
}

}  // namespace
}  // namespace spmd::runtime
