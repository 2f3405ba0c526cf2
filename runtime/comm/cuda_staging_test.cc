// The staged communicator with the CUDA staging (runtime/comm/cuda_staging.h) on thread ranks
// whose buffers all live on GPU 0, each rank on its own stream (what spmd-train --device
// cuda runs when ranks share a GPU, with MPI in place of the threads): every collective and
// point to point equals the thread backend on host buffers byte for byte (the reductions run
// on the host side), with the same counters. (Dispatch on CUDA tensors against the CPU,
// within tolerances, is the GPU property suite's.) Label gpu: skips without a usable GPU
// (with CUDA's reason). Not yet run on a GPU.
#include "runtime/comm/cuda_staging.h"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/testing/device_communicator_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using testing::Place;

Tensor Up(const Tensor& host, kernels::Device device, kernels::Stream stream) {
  return kernels::cuda::ToDevice(host, device, stream);
}
Tensor Down(const Tensor& t) { return kernels::cuda::ToHost(t); }

struct Outcome {
  std::vector<std::vector<Tensor>> results;
  std::vector<CommCounters> counters;
};

// fn on `world` thread ranks with host buffers, or each wrapped in a StagedCommunicator
// with its buffers on GPU 0 and its own stream.
Outcome OnRanks(int64_t world, bool cuda, const std::function<std::vector<Tensor>(const Place&)>& fn) {
  Outcome out;
  out.results.resize(static_cast<size_t>(world));
  out.counters.resize(static_cast<size_t>(world));
  std::mutex mu;
  RunRanks(world, [&](Communicator& host) {
    std::vector<Tensor> mine;
    CommCounters counters;
    if (cuda) {
      const kernels::Device gpu = kernels::Device::Cuda(0);
      StagedCommunicator comm(host, gpu, kernels::cuda::NewStream(gpu), CudaHostStaging());
      mine = fn(Place{comm, false, Up, Down});
      counters = comm.counters();
    } else {
      mine = fn(Place{host});
      counters = host.counters();
    }
    std::lock_guard<std::mutex> lock(mu);
    out.results[static_cast<size_t>(host.rank())] = std::move(mine);
    out.counters[static_cast<size_t>(host.rank())] = counters;
  }, testing::Quick());
  return out;
}

void ExpectSame(const Outcome& cuda, const Outcome& cpu) {
  ASSERT_EQ(cuda.results.size(), cpu.results.size());
  for (size_t r = 0; r < cpu.results.size(); ++r) {
    ASSERT_EQ(cuda.results[r].size(), cpu.results[r].size());
    ASSERT_FALSE(cpu.results[r].empty());
    for (size_t i = 0; i < cpu.results[r].size(); ++i) {
      EXPECT_TRUE(testing::SameBytes(cuda.results[r][i], cpu.results[r][i])) << "rank " << r << " result " << i;
    }
    for (int k = 0; k < kNumCollectives; ++k) {
      EXPECT_EQ(cuda.counters[r].per_kind[k], cpu.counters[r].per_kind[k]) << "rank " << r << " kind " << k;
    }
  }
}

bool HaveGpu(std::string* why) {
  if (kernels::cuda::DeviceCount(why) == 0) return false;
  kernels::cuda::EnableCuda();
  return true;
}

TEST(CudaStaging, CollectivesOnStagedGpuBuffersEqualTheCpu) {
  std::string why;
  if (!HaveGpu(&why)) GTEST_SKIP() << why;
  for (int64_t world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ExpectSame(OnRanks(world, true, testing::Collectives), OnRanks(world, false, testing::Collectives));
  }
}

}  // namespace
}  // namespace spmd::runtime
