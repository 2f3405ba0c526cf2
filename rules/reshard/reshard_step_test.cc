#include "rules/reshard/reshard_step.h"

#include <gtest/gtest.h>

#include <string>

#include "rules/model/error.h"

namespace spmd {
namespace {

DistAttr P(const std::string& text) { return ParsePlacementString(text, 2, "test"); }

ReshardStep Step(StepAction action, const std::string& before, const Mesh& mesh = Mesh({2, 2})) {
  ReshardStep step;
  step.action = std::move(action);
  step.mesh = mesh;
  step.to_mesh = mesh;
  step.before = P(before);
  return step;
}

// Throws SpmdError(kInvalidArgument, "step") with `why` in its message.
void ExpectBadStep(const ReshardStep& step, const std::string& why) {
  try {
    ApplyStep(step);
    ADD_FAILURE() << step.Describe() << ": accepted";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument) << e.what();
    EXPECT_EQ(e.field(), "step") << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(ReshardStepTest, EveryKindAppliesItsContract) {
  EXPECT_EQ(ApplyStep(Step(AllGather{{1}, 0}, "[S(0)#0, S(0)#1]")), P("[S(0), R]"));
  EXPECT_EQ(ApplyStep(Step(AllGather{{0, 1}, 0}, "[S(0)#0, S(0)#1]")), P("[R, R]"));
  EXPECT_EQ(ApplyStep(Step(ReduceScatter{{0}, 1, ReduceOp::kMax}, "[P(max), R]")),
            P("[S(1), R]"));
  EXPECT_EQ(ApplyStep(Step(AllReduce{{0, 1}, ReduceOp::kSum}, "[P(sum), P(sum)]")),
            P("[R, R]"));
  EXPECT_EQ(ApplyStep(Step(AllToAll{{0}, 0, 1}, "[S(0), R]")), P("[S(1), R]"));
  EXPECT_EQ(ApplyStep(Step(LocalSlice{1, 0}, "[S(0), R]")), P("[S(0)#0, S(0)#1]"));
  EXPECT_EQ(ApplyStep(Step(LocalPartial{1, ReduceOp::kMin}, "[S(0), R]")), P("[S(0), P(min)]"));
  EXPECT_EQ(ApplyStep(Step(ShardToPartial{0, 1}, "[S(1), R]")), P("[P(sum), R]"));
  EXPECT_EQ(ApplyStep(Step(Rescale{0, ReduceOp::kSum, ReduceOp::kAvg}, "[P(sum), R]")),
            P("[P(avg), R]"));
  ReshardStep move = Step(SendRecv{}, "[S(0), R]");
  move.to_mesh = Mesh({4}, {4, 5, 6, 7});
  move.after = ParsePlacementString("[S(1)]", 2, "test");
  EXPECT_EQ(ApplyStep(move), move.after);
}

TEST(ReshardStepTest, BrokenPreconditionsAreTypedErrors) {
  ExpectBadStep(Step(AllGather{{0}, 0}, "[S(0)#0, S(0)#1]"), "minor-most suffix");
  ExpectBadStep(Step(AllGather{{}, 0}, "[S(0), R]"), "no mesh axis");
  ExpectBadStep(Step(AllGather{{0, 0}, 0}, "[S(0), R]"), "not a set of mesh axes");
  ExpectBadStep(Step(AllGather{{2}, 0}, "[S(0), R]"), "not a set of mesh axes");
  ExpectBadStep(Step(ReduceScatter{{0}, 3, ReduceOp::kSum}, "[P(sum), R]"), "not a dim");
  ExpectBadStep(Step(ReduceScatter{{0}, 0, ReduceOp::kMax}, "[P(sum), R]"), "not partial(max)");
  ExpectBadStep(Step(AllReduce{{1}, ReduceOp::kSum}, "[P(sum), R]"), "not partial(sum)");
  ExpectBadStep(Step(AllToAll{{0}, 0, 0}, "[S(0), R]"), "two different dims");
  ExpectBadStep(Step(LocalSlice{0, 1}, "[S(0), R]"), "not replicated");
  ExpectBadStep(Step(LocalPartial{0, ReduceOp::kSum}, "[P(sum), R]"), "not replicated");
  ExpectBadStep(Step(ShardToPartial{1, 0}, "[S(0), R]"), "minor-most suffix");
  ExpectBadStep(Step(Rescale{0, ReduceOp::kSum, ReduceOp::kMax}, "[P(sum), R]"),
                "sum into avg");
  ReshardStep partial_move = Step(SendRecv{}, "[P(sum), R]");
  partial_move.after = P("[R, R]");
  ExpectBadStep(partial_move, "no partial values");
  ReshardStep other_mesh = Step(AllGather{{0}, 0}, "[S(0), R]");
  other_mesh.to_mesh = Mesh({4});
  ExpectBadStep(other_mesh, "only send_recv changes the mesh");
}

TEST(ReshardStepTest, KindAxesAndDescription) {
  const ReshardStep rs = Step(ReduceScatter{{1}, 1, ReduceOp::kSum}, "[R, P(sum)]");
  EXPECT_EQ(rs.kind(), StepKind::kReduceScatter);
  EXPECT_EQ(rs.axes(), (AxisList{1}));
  EXPECT_EQ(rs.Describe(), "{1} reduce_scatter(sum) -> dim 1");
  EXPECT_EQ(Step(AllToAll{{0}, 0, 1}, "[S(0), R]").Describe(), "{0} all_to_all dim 0 -> dim 1");
  EXPECT_EQ(Step(AllReduce{{0, 1}, ReduceOp::kSum}, "[P(sum), P(sum)]").Describe(),
            "{0,1} all_reduce(sum)");
  EXPECT_EQ(Step(Rescale{1, ReduceOp::kAvg, ReduceOp::kSum}, "[R, P(avg)]").Describe(),
            "{1} rescale(avg -> sum)");
  const ReshardStep p2p = Step(SendRecv{}, "[S(0), R]");
  EXPECT_EQ(p2p.axes(), AxisList{});
  EXPECT_EQ(p2p.Describe(), "p2p send_recv");
  EXPECT_TRUE(Communicates(StepKind::kAllToAll));
  EXPECT_FALSE(Communicates(StepKind::kShardToPartial));
  EXPECT_EQ(p2p.As<SendRecv>() != nullptr, true);
  EXPECT_EQ(p2p.As<AllGather>(), nullptr);
}

}  // namespace
}  // namespace spmd
