// The executor on the thread backend: strided copies, and worked examples of every step
// kind with their exact per-rank bytes (counted == planned). The random round trips are in
// property_tests/runtime_properties_test.cc.
#include "runtime/exec/reshard_executor.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <numeric>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/reshard/reshard_print.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using testing::Iota;
using testing::Parse;
using testing::Quick;


TEST(CopyBox, CopiesASubBoxBetweenStridedArrays) {
  const Tensor src = Iota({3, 4, 5}, DType::kFloat64);
  Tensor dst({2, 6, 5}, DType::kFloat64);
  kernels::BackendFor(kernels::Device::Host())
      .CopyBox(src.bytes(), src.shape(), {1, 1, 0}, dst.bytes(), dst.shape(), {0, 2, 0},
               {2, 3, 5}, 8, kernels::Stream{});
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t k = 0; k < 5; ++k) {
        const double got = dst.data<double>()[(i * 6 + j) * 5 + k];
        const double want = (j >= 2 && j < 5) ? src.data<double>()[((i + 1) * 4 + (j - 1)) * 5 + k] : 0.0;
        EXPECT_EQ(got, want) << i << " " << j << " " << k;
      }
    }
  }
}

TEST(CopyBox, SliceBoxHandlesScalarsAndEmptyBoxes) {
  const Tensor scalar = Tensor::FromVector<double>({}, {7.0});
  EXPECT_EQ(SliceBox(scalar, {}).data<double>()[0], 7.0);
  const Tensor t = Iota({4, 3}, DType::kFloat32);
  EXPECT_EQ(SliceBox(t, {Range{1, 1}, Range{0, 3}}).shape(), (Shape{0, 3}));
  const Tensor col = SliceBox(t, {Range{0, 4}, Range{2, 3}});
  EXPECT_EQ(col.shape(), (Shape{4, 1}));
  EXPECT_EQ(col.data<float>()[3], 12.0f);
}

// Reshards `global` from `from` to `to` on `mesh` over `world` thread ranks; checks that
// ToGlobal gives it back, that every step's counted bytes equal the plan's, and
// returns each rank's report.
std::vector<ReshardReport> RoundTrip(int64_t world, const Mesh& mesh, const Tensor& global,
                                     const DistAttr& from, const DistAttr& to,
                                     const Mesh* to_mesh = nullptr) {
  std::vector<ReshardReport> reports(world);
  RunRanks(
      world,
      [&](Communicator& comm) {
        const DistTensor x = DistTensor::ShardTensor(global, mesh, from, comm.rank());
        const DistTensor y = to_mesh ? x.Reshard(*to_mesh, to, comm, &reports[comm.rank()])
                                     : x.Reshard(to, comm, &reports[comm.rank()]);
        for (const StepRecord& r : reports[comm.rank()].steps) {
          EXPECT_EQ(r.counted, r.planned) << "rank " << comm.rank() << " " << ToString(r.kind);
          EXPECT_EQ(r.transport, r.planned) << "rank " << comm.rank() << " " << ToString(r.kind);
        }
        const std::optional<Tensor> back = y.ToGlobal(comm);
        if (y.has_local()) {
          EXPECT_TRUE(back.has_value() && *back == global) << "rank " << comm.rank();
        } else {
          EXPECT_FALSE(back.has_value());
        }
      },
      Quick());
  return reports;
}

TEST(Executor, TwoPartialAxesToReplicatedIsOneAllReduceAtTheBound) {
  // The worked example of rules/reshard/reshard.h: [1024, 512] float32 on 2x2, (P, P) -> (R, R).
  const Mesh mesh({2, 2});
  const Tensor global = Iota({1024, 512}, DType::kFloat32);
  const auto reports = RoundTrip(4, mesh, global, Parse("[P(sum), P(sum)]", 2), Parse("[R, R]", 2));
  for (const ReshardReport& r : reports) {
    ASSERT_EQ(r.steps.size(), 1u);
    EXPECT_EQ(r.steps[0].kind, StepKind::kAllReduce);
    EXPECT_EQ(r.counted, (RankBytes{3 << 20, 3 << 20}));
    EXPECT_EQ(r.counted, r.planned);
  }
}

TEST(Executor, UnevenAllToAllMovesExactlyThePlannedBytes) {
  // D6: [10, 7] over 4 ranks, S(0) -> S(1); rank 0 receives 56 bytes (the plan's max).
  const Mesh mesh({4});
  const auto reports = RoundTrip(4, mesh, Iota({10, 7}, DType::kFloat32), Parse("[S(0)]", 2), Parse("[S(1)]", 2));
  int64_t max_received = 0;
  for (const ReshardReport& r : reports) {
    ASSERT_EQ(r.steps.size(), 1u);
    EXPECT_EQ(r.steps[0].kind, StepKind::kAllToAll);
    EXPECT_EQ(r.counted, r.planned);
    max_received = std::max(max_received, r.counted.received);
  }
  EXPECT_EQ(max_received, 56);
}

TEST(Executor, GathersAndScattersAlongInnerDimsAndCoShards) {
  const Mesh mesh({2, 3}, {5, 0, 3, 1, 4, 2});  // permuted ids
  const Tensor global = Iota({5, 7, 3}, DType::kFloat64);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"[S(1)#0, S(1)#1]", "[R, R]"},        // co-shard gathered in one step
           {"[S(1)#1, S(1)#0]", "[S(2), R]"},     // reversed co-shard order
           {"[S(2), S(1)]", "[S(1), S(2)]"},      // all-to-all on both axes
           {"[R, S(0)]", "[S(0)#1, S(0)#0]"},     // a local slice under a co-shard
           {"[S(0), S(2)]", "[R, R]"}}) {
    SCOPED_TRACE(from + " -> " + to);
    for (const ReshardReport& r : RoundTrip(6, mesh, global, Parse(from, 3), Parse(to, 3))) {
      EXPECT_EQ(r.counted, r.planned);
    }
  }
}

TEST(Executor, PartialTargetsAndSourcesReduceToTheValue) {
  const Mesh mesh({2, 2});
  const Tensor global = Iota({6, 5}, DType::kInt64);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"[S(0), R]", "[P(sum), S(1)]"},     // shard to partial
           {"[P(max), S(0)]", "[R, P(max)]"},   // partial max reduced then local partial
           {"[P(sum), P(sum)]", "[S(1), R]"},   // reduce-scatter
           {"[R, R]", "[P(prod), P(prod)]"}}) { // local partials
    SCOPED_TRACE(from + " -> " + to);
    RoundTrip(4, mesh, global, Parse(from, 2), Parse(to, 2));
  }
}

TEST(Executor, MovesToASubMeshAndAnotherShape) {
  const Mesh mesh({2, 2});
  const Mesh sub({2}, {3, 1});
  const Mesh other({4}, {2, 0, 3, 1});
  const Tensor global = Iota({9, 4}, DType::kFloat32);
  const auto reports = RoundTrip(5, mesh, global, Parse("[S(0), S(1)]", 2), Parse("[S(1)]", 2), &sub);
  EXPECT_EQ(reports[4].steps.size(), 0u);  // rank 4 is in neither mesh
  for (const ReshardReport& r : reports) EXPECT_EQ(r.counted, r.planned);
  RoundTrip(5, mesh, global, Parse("[P(sum), S(0)]", 2), Parse("[S(0)]", 2), &other);
}

TEST(Executor, UnevenReductionsCountWholeElements) {
  // 5 float32 over 4 ranks: the balanced split gives the rank at position 0 a 2-element
  // chunk (5 - 2 + 3 * 2 = 9 elements, 36 bytes) and the others one (7 elements, 28
  // bytes); the plan and the communicator (RoundTrip checks every step) count that. The
  // averaged bound is ceil((2 * 5 + 4 * 5) / 4) = 8 elements.
  const Mesh mesh({4});
  const ReshardPlan plan = PlanReshard(mesh, {5}, DType::kFloat32, Parse("[P(sum)]", 1), Parse("[R]", 1));
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind(), StepKind::kAllReduce);
  EXPECT_EQ(plan.bytes_per_rank, 36);
  EXPECT_EQ(plan.lower_bound_bytes, 32);
  for (int64_t pid = 0; pid < 4; ++pid) {
    const int64_t want = pid == 0 ? 36 : 28;
    EXPECT_EQ(StepBytesOf(plan.steps[0], plan.shape, plan.dtype, pid), (RankBytes{want, want}));
  }
  RoundTrip(4, mesh, Iota({5}, DType::kFloat32), Parse("[P(sum)]", 1), Parse("[R]", 1));
}

TEST(Executor, RejectsABufferOfTheWrongShape) {
  const Mesh mesh({2});
  const ReshardPlan plan = PlanReshard(mesh, {4}, DType::kFloat32, Parse("[S(0)]", 1), Parse("[R]", 1));
  EXPECT_THROW(RunRanks(2,
                        [&](Communicator& comm) {
                          ExecutePlan(plan, Tensor({3}, DType::kFloat32), comm);
                        },
                        Quick()),
               CommError);
}

// The plan cache answers every request with the plan PlanReshard gives that request, for
// requests that differ from one another in a single field (either mesh's ids, shape or
// axis names, a dim's axes or their co-shard order, a partial op, the global shape, the
// dtype): a key that left any of them out would hand one of these another's plan.
TEST(PlanCache, AnswersEachRequestWithItsOwnPlan) {
  struct Request {
    Mesh from_mesh, to_mesh;
    DistAttr from, to;
    Shape shape;
    DType dtype;
  };
  const Mesh grid({2, 2});
  const DistAttr s0 = Parse("[S(0), S(1)]", 2), rr = Parse("[R, R]", 2);
  std::vector<Request> requests = {
      {grid, grid, s0, rr, {8, 6}, DType::kFloat32},
      {grid, grid, s0, rr, {8, 6}, DType::kFloat64},
      {grid, grid, s0, rr, {6, 8}, DType::kFloat32},
      {grid, grid, s0, rr, {8, 6, 1}, DType::kFloat32},
      {grid, grid, Parse("[S(1), S(0)]", 2), rr, {8, 6}, DType::kFloat32},
      {grid, grid, Parse("[S(0)#1, S(0)#0]", 2), rr, {8, 6}, DType::kFloat32},
      {grid, grid, Parse("[S(0)#0, S(0)#1]", 2), rr, {8, 6}, DType::kFloat32},
      {grid, grid, Parse("[P(sum), R]", 2), rr, {8, 6}, DType::kFloat32},
      {grid, grid, Parse("[P(max), R]", 2), rr, {8, 6}, DType::kFloat32},
      {grid, grid, s0, Parse("[R, S(0)]", 2), {8, 6}, DType::kFloat32},
      {grid, Mesh({2, 2}, {3, 2, 1, 0}), s0, rr, {8, 6}, DType::kFloat32},
      {grid, Mesh({4}), s0, Parse("[R]", 2), {8, 6}, DType::kFloat32},
      {grid, Mesh({2, 2}, {}, {"dp", "tp"}), s0, rr, {8, 6}, DType::kFloat32},
      {Mesh({2, 2}, {0, 2, 1, 3}), grid, s0, rr, {8, 6}, DType::kFloat32},
      {Mesh({4}), Mesh({4}), Parse("[S(0)]", 2), Parse("[R]", 2), {8, 6}, DType::kFloat32},
  };
  for (Request& r : requests) {
    if (r.from.rank() != static_cast<int>(r.shape.size())) {  // the 3-d shape: one more dim
      r.from.dims.resize(r.shape.size());
      r.to.dims.resize(r.shape.size());
    }
  }
  std::vector<ReshardPlan> planned;
  std::vector<std::string> want;
  for (const Request& r : requests) {
    planned.push_back(r.from_mesh == r.to_mesh
                          ? PlanReshard(r.from_mesh, r.shape, r.dtype, r.from, r.to)
                          : PlanReshard(r.from_mesh, r.from, r.to_mesh, r.to, r.shape, r.dtype));
    want.push_back(ToString(planned.back()));
  }
  for (int pass = 0; pass < 2; ++pass) {  // cold, then warm, in the other order
    for (size_t k = 0; k < requests.size(); ++k) {
      const size_t i = pass == 0 ? k : requests.size() - 1 - k;
      const Request& r = requests[i];
      const std::shared_ptr<const ReshardPlan> plan =
          CachedPlan(r.from_mesh, r.from, r.to_mesh, r.to, r.shape, r.dtype);
      EXPECT_EQ(ToString(*plan), want[i]) << "request " << i << ", pass " << pass;
      const ReshardPlan& p = planned[i];
      EXPECT_TRUE(plan->from_mesh == p.from_mesh && plan->to_mesh == p.to_mesh && plan->from == p.from &&
                  plan->to == p.to && plan->shape == p.shape && plan->dtype == p.dtype)
          << "request " << i << ", pass " << pass;
      EXPECT_EQ(ToString(CachedPlanReshard(r.from_mesh, r.from, r.to_mesh, r.to, r.shape, r.dtype)), want[i]);
    }
  }
}

}  // namespace
}  // namespace spmd::runtime
