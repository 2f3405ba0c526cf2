// DistTensor on the thread backend: sharding, LocalPartial's contract for partial targets,
// FromLocal's checks, ShardTensorFrom one rank, ToGlobal, and ranks outside the mesh.
#include "runtime/exec/dist_tensor.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "rules/model/error.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using testing::Iota;
using testing::Parse;
using testing::Quick;


TEST(DistTensor, ShardTensorGivesEachRankItsChunk) {
  const Mesh mesh({2, 2}, {3, 2, 1, 0});
  const Tensor global = Iota({5, 3});
  // Rank 1 is at coordinate (1, 0): rows [3, 5) of the uneven split over axis 0.
  const DistTensor x = DistTensor::ShardTensor(global, mesh, Parse("[S(0), R]", 2), 1);
  ASSERT_TRUE(x.has_local());
  EXPECT_EQ(x.local().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.local_offset(), (Shape{3, 0}));
  EXPECT_EQ(x.local().data<double>()[0], 10.0);
  const DistTensor outside = DistTensor::ShardTensor(global, mesh, Parse("[S(0), R]", 2), 7);
  EXPECT_FALSE(outside.has_local());
  EXPECT_THROW(outside.local(), SpmdError);
}

TEST(DistTensor, PartialTargetsFollowLocalPartial) {
  const Mesh mesh({2});
  const Tensor global = Iota({2});
  auto local = [&](const char* attr, int64_t pid) {
    return DistTensor::ShardTensor(global, mesh, Parse(attr, 1), pid).local().data<double>()[1];
  };
  EXPECT_EQ(local("[P(sum)]", 0), 2.0);
  EXPECT_EQ(local("[P(sum)]", 1), 0.0);
  EXPECT_EQ(local("[P(prod)]", 1), 1.0);
  EXPECT_EQ(local("[P(max)]", 1), 2.0);
  EXPECT_EQ(local("[P(avg)]", 1), 2.0);
}

TEST(DistTensor, FromLocalChecksTheShard) {
  const Mesh mesh({2});
  EXPECT_THROW(DistTensor::FromLocal(Tensor({3}, DType::kFloat64), {5}, DType::kFloat64, mesh,
                                     Parse("[S(0)]", 1), 1),
               SpmdError);
  EXPECT_THROW(DistTensor::FromLocal(Tensor({2}, DType::kFloat32), {5}, DType::kFloat64, mesh,
                                     Parse("[S(0)]", 1), 1),
               SpmdError);
  const DistTensor ok = DistTensor::FromLocal(Tensor({2}, DType::kFloat64), {5}, DType::kFloat64, mesh,
                                              Parse("[S(0)]", 1), 1);
  EXPECT_EQ(ok.local_offset(), (Shape{3}));
  EXPECT_THROW(DistTensor::FromLocal(Tensor(), {5}, DType::kFloat64, mesh, Parse("[S(1)]", 1), 0),
               SpmdError);
}

TEST(DistTensor, ShardTensorFromOneRankSendsEachRankItsShard) {
  const Mesh mesh({3}, {3, 1, 2});
  const Tensor global = Iota({7, 2});
  RunRanks(
      4,
      [&](Communicator& comm) {
        const Tensor* mine = comm.rank() == 0 ? &global : nullptr;
        const DistTensor x = DistTensor::ShardTensorFrom(mine, 0, mesh, Parse("[S(0)]", 2), comm);
        const DistTensor want = DistTensor::ShardTensor(global, mesh, Parse("[S(0)]", 2), comm.rank());
        EXPECT_EQ(x.has_local(), want.has_local());
        if (x.has_local()) {
          EXPECT_TRUE(x.local() == want.local());
          EXPECT_EQ(x.shape(), global.shape());
        }
        // The root sends the 14 elements once, in shards; the others receive their own.
        const int64_t sent = comm.counters()[Collective::kSend].sent;
        if (comm.rank() == 0) {
          EXPECT_EQ(sent, 14 * 8);
        }
      },
      Quick());
}

TEST(DistTensor, ToGlobalReducesAndGathersOnTheMeshOnly) {
  const Mesh mesh({2, 2}, {1, 3, 0, 2});
  const Tensor global = Iota({4, 3});
  for (const char* attr : {"[S(0), S(1)]", "[P(sum), S(0)]", "[S(1)#1, S(1)#0]", "[P(max), P(max)]"}) {
    SCOPED_TRACE(attr);
    RunRanks(
        5,
        [&](Communicator& comm) {
          const DistTensor x = DistTensor::ShardTensor(global, mesh, Parse(attr, 2), comm.rank());
          const std::optional<Tensor> back = x.ToGlobal(comm);
          EXPECT_EQ(back.has_value(), comm.rank() != 4);
          if (back) {
            EXPECT_TRUE(*back == global);
          }
        },
        Quick());
  }
}

TEST(DistTensor, ReshardRejectsAnotherRanksCommunicator) {
  const Mesh mesh({2});
  const DistTensor x = DistTensor::ShardTensor(Iota({2}), mesh, Parse("[S(0)]", 1), 1);
  EXPECT_THROW(RunRanks(1, [&](Communicator& comm) { x.Reshard(Parse("[R]", 1), comm); }, Quick()),
               CommError);
}

}  // namespace
}  // namespace spmd::runtime
