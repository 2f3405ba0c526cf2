// The Backend seam (kernels/backend.h): Dispatch's kernel call, the reshard executor's local
// steps and the communicators' local paths all go through BackendFor(device). A wrapping
// backend, registered for the host, counts what it is asked to do and marks kernel results;
// a path that bypassed it (a direct CPU kernel call, a host memcpy or loop) leaves its count
// at zero or its mark missing, and these tests fail.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "rules/engine/registry.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/exec/reshard_executor.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Backend;
using kernels::Stream;
using kernels::Tensor;
using kernels::Tensors;
using testing::Iota;
using testing::Parse;
using testing::Quick;

// Forwards every call to the CPU backend and counts it (rank threads call it concurrently).
// With `mark_kernels`, adds 1000 to every float32 element a kernel outputs.
class CountingBackend final : public Backend {
 public:
  std::atomic<int64_t> kernels{0}, copies{0}, box_copies{0}, box_elements{0}, fills{0},
      scales{0}, reduces{0}, truths{0};
  bool mark_kernels = false;

  kernels::DeviceKind kind() const override { return kernels::DeviceKind::kHost; }
  kernels::Allocator& AllocatorFor(kernels::Device device) override {
    return cpu_.AllocatorFor(device);
  }
  Tensors RunKernel(const KernelRef& op, const kernels::TensorArgs& inputs,
                    const Attrs& attrs) override {
    ++kernels;
    Tensors out = cpu_.RunKernel(op, inputs, attrs);
    if (mark_kernels) {
      for (Tensor& t : out) {
        if (t.dtype() != DType::kFloat32) continue;
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += 1000.0f;
      }
    }
    return out;
  }
  void Copy(void* dst, const void* src, size_t nbytes, Stream s) override {
    ++copies;
    cpu_.Copy(dst, src, nbytes, s);
  }
  void CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream s) override {
    cpu_.CopyFromHost(dst, host_src, nbytes, s);
  }
  void CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream s) override {
    cpu_.CopyToHost(host_dst, src, nbytes, s);
  }
  void CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
               const std::vector<int64_t>& src_at, std::byte* dst,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
               const std::vector<int64_t>& extent, size_t element_size, Stream s) override {
    ++box_copies;
    int64_t volume = 1;
    for (int64_t x : extent) volume *= x;
    box_elements += volume;
    cpu_.CopyBox(src, src_shape, src_at, dst, dst_shape, dst_at, extent, element_size, s);
  }
  void Fill(void* dst, int64_t count, DType dtype, double value, Stream s) override {
    ++fills;
    cpu_.Fill(dst, count, dtype, value, s);
  }
  void Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide, Stream s) override {
    ++scales;
    cpu_.Scale(buffer, count, dtype, n, divide, s);
  }
  void Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op, Stream s) override {
    ++reduces;
    cpu_.Reduce(acc, in, count, dtype, op, s);
  }
  void ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream s) override {
    ++truths;
    cpu_.ToTruth(in, out, count, dtype, s);
  }
  void Synchronize(Stream s) override { cpu_.Synchronize(s); }

 private:
  kernels::CpuBackend cpu_;
};

// Registers a CountingBackend for the host for the test's lifetime.
class BackendSeam : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = kernels::SetBackend(kernels::DeviceKind::kHost, &backend_);
  }
  void TearDown() override { kernels::SetBackend(kernels::DeviceKind::kHost, previous_); }

  CountingBackend backend_;

 private:
  Backend* previous_ = nullptr;
};

TEST_F(BackendSeam, BackendForReturnsTheRegisteredBackendAndRestoresTheBuiltIn) {
  EXPECT_EQ(&kernels::BackendFor(kernels::Device::Host()), &backend_);
  EXPECT_EQ(kernels::SetBackend(kernels::DeviceKind::kHost, nullptr), &backend_);
  EXPECT_NE(dynamic_cast<kernels::CpuBackend*>(&kernels::BackendFor(kernels::Device::Host())),
            nullptr);
  kernels::SetBackend(kernels::DeviceKind::kHost, &backend_);
}

TEST_F(BackendSeam, DispatchRunsTheKernelThroughTheBackend) {
  backend_.mark_kernels = true;
  const Mesh mesh({2});
  const Tensor x = Iota({4, 3}, DType::kFloat32), y = Iota({4, 3}, DType::kFloat32);
  RunRanks(
      2,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(0)]", 2), comm.rank());
        const DistTensor dy = DistTensor::ShardTensor(y, mesh, Parse("[S(0)]", 2), comm.rank());
        const std::vector<DistTensor> out = Dispatch("add", {dx, dy}, Attrs(), comm);
        const Tensor& local = out.at(0).local();
        for (int64_t i = 0; i < local.numel(); ++i) {
          const float want = 2.0f * static_cast<float>(comm.rank() * 6 + i + 1) + 1000.0f;
          EXPECT_EQ(local.data<float>()[i], want) << "rank " << comm.rank() << " element " << i;
        }
      },
      Quick());
  EXPECT_EQ(backend_.kernels.load(), 2);  // one kernel per rank
}

// Shards `global` as `from` on a mesh of `world` thread ranks, then reshards it to `to`
// (only this between the two reads of `count`), checks the result, and returns how much
// `count` grew during the reshard.
int64_t CountDuringReshard(const std::atomic<int64_t>& count, int64_t world, const Tensor& global,
                           const std::string& from, const std::string& to) {
  const Mesh mesh({world});
  const int rank = static_cast<int>(global.rank());
  std::vector<std::optional<DistTensor>> shards(world), results(world);
  RunRanks(
      world,
      [&](Communicator& comm) {
        shards[comm.rank()] = DistTensor::ShardTensor(global, mesh, Parse(from, rank), comm.rank());
      },
      Quick());
  const int64_t before = count.load();
  RunRanks(
      world,
      [&](Communicator& comm) { results[comm.rank()] = shards[comm.rank()]->Reshard(Parse(to, rank), comm); },
      Quick());
  const int64_t grew = count.load() - before;
  for (int64_t r = 0; r < world; ++r) {
    const DistTensor want = DistTensor::ShardTensor(global, mesh, Parse(to, rank), r);
    EXPECT_TRUE(results[r]->local() == want.local()) << from << " -> " << to << " rank " << r;
  }
  return grew;
}

TEST_F(BackendSeam, TheExecutorsLocalSliceCopiesThroughTheBackend) {
  // LocalSlice: each of 2 ranks copies its 2x3 shard out of the replicated 4x3.
  EXPECT_EQ(CountDuringReshard(backend_.box_elements, 2, Iota({4, 3}, DType::kFloat32), "[R]",
                               "[S(0)]"),
            12);
}

TEST_F(BackendSeam, StridedAllGatherCopiesTheOwnChunkThroughTheBackend) {
  // All-gather along dim 1 of a 4x6 (dims before it are not 1): each rank copies its own
  // 4x3 chunk into the result (the executor) and the other's into its place as it arrives
  // (the thread backend's RecvBox): 2 ranks x (12 + 12).
  EXPECT_EQ(CountDuringReshard(backend_.box_elements, 2, Iota({4, 6}, DType::kFloat32), "[S(1)]",
                               "[R]"),
            48);
}

TEST_F(BackendSeam, PartialStepsFillAndReduceThroughTheBackend) {
  const Tensor x = Iota({6}, DType::kFloat32);
  const int64_t fills0 = backend_.fills.load();
  // R -> P(sum): LocalPartial, the non-zero coordinates fill with 0; P(sum) -> R:
  // all_reduce on the thread backend, its reduction loop through the backend.
  const Mesh mesh({3});
  RunRanks(
      3,
      [&](Communicator& comm) {
        DistTensor a = DistTensor::ShardTensor(x, mesh, Parse("[R]", 1), comm.rank());
        DistTensor p = a.Reshard(Parse("[P(sum)]", 1), comm);
        DistTensor r = p.Reshard(Parse("[R]", 1), comm);
        EXPECT_TRUE(r.local() == x);
      },
      Quick());
  EXPECT_GE(backend_.fills.load() - fills0, 2);    // ranks 1 and 2
  EXPECT_GE(backend_.reduces.load(), 3 * 2);       // each rank folds 2 other members in
}

TEST_F(BackendSeam, AvgAndAnyUseTheBackendsScaleAndTruth) {
  const Mesh mesh({2});
  RunRanks(
      2,
      [&](Communicator& comm) {
        std::vector<float> v = {1.0f, 0.0f, 3.0f};
        comm.AllReduce(v.data(), v.data(), 3, DType::kFloat32, ReduceOp::kAvg, {0, 1});
        EXPECT_EQ(v, (std::vector<float>{1.0f, 0.0f, 3.0f}));
        std::vector<float> w = {comm.rank() == 0 ? 2.0f : 0.0f, 0.0f};
        comm.AllReduce(w.data(), w.data(), 2, DType::kFloat32, ReduceOp::kAny, {0, 1});
        EXPECT_EQ(w, (std::vector<float>{1.0f, 0.0f}));
        // A group of one rank: the base class's local path.
        std::vector<int64_t> s = {5, 0}, t(2);
        comm.AllReduce(s.data(), t.data(), 2, DType::kInt64, ReduceOp::kAll, {comm.rank()});
        EXPECT_EQ(t, (std::vector<int64_t>{1, 0}));
      },
      Quick());
  EXPECT_EQ(backend_.scales.load(), 2);   // avg's division, once per rank
  EXPECT_GE(backend_.truths.load(), 2 * 2 + 2);  // any: every member's input; all: once per rank
  EXPECT_GE(backend_.copies.load(), 2);   // group of one: send -> recv
}

}  // namespace
}  // namespace spmd::runtime
