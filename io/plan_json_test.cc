#include "io/plan_json.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "rules/reshard/reshard.h"

namespace spmd::io {
namespace {

using nlohmann::json;

DistAttr P(const std::string& text) { return ParsePlacementString(text, 2, "test"); }

std::set<std::string> Keys(const json& j) {
  std::set<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  return keys;
}

TEST(PlanJsonTest, PlanFields) {
  const ReshardPlan plan =
      PlanReshard(Mesh({2, 2}), {1024, 512}, DType::kFloat32, P("[P(sum), P(sum)]"), P("[R, R]"));
  const json j = ToJson(plan);
  EXPECT_EQ(j["shape"], (std::vector<int64_t>{1024, 512}));
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["from"], "[P(sum), P(sum)]");
  EXPECT_EQ(j["to"], "[R, R]");
  EXPECT_EQ(j["from_mesh"]["shape"], (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(j["to_mesh"]["process_ids"], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(j["bytes_per_rank"], 3145728);
  EXPECT_EQ(j["lower_bound_bytes"], 3145728);
  EXPECT_EQ(j["ratio"], 1.0);
  ASSERT_EQ(j["steps"].size(), 1u);
  EXPECT_EQ(j["steps"][0]["kind"], "all_reduce");
  EXPECT_EQ(j["steps"][0]["group"], (std::vector<int>{0, 1}));
  EXPECT_EQ(j["steps"][0]["op"], "sum");
  EXPECT_EQ(j["steps"][0]["bytes_per_rank"], 3145728);
  // The modelled time: the plan's and its step's, in seconds; what was minimised; the model.
  EXPECT_EQ(j["steps"][0]["messages"], 6);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), plan.Seconds());
  EXPECT_DOUBLE_EQ(j["steps"][0]["seconds"].get<double>(), plan.Seconds());
  EXPECT_GT(plan.Seconds(), 0);
  EXPECT_EQ(j["objective"], "bytes");
  EXPECT_EQ(j["cost_model_source"], CostModel::Default().source);
}

// Every step kind carries exactly its own fields, with the values of its action.
TEST(PlanJsonTest, EachKindHasItsOwnFields) {
  struct Row {
    const char* from;
    const char* to;
    const char* kind;
    std::set<std::string> fields;  // besides kind, group, before, after, bytes_per_rank
    json values;
  };
  const std::vector<Row> rows = {
      {"[S(0)]", "[R]", "all_gather", {"dim"}, {{"dim", 0}, {"group", {0}}}},
      {"[P(sum)]", "[S(1)]", "reduce_scatter", {"dim", "op"}, {{"dim", 1}, {"op", "sum"}}},
      {"[P(max)]", "[R]", "all_reduce", {"op"}, {{"op", "max"}}},
      {"[S(0)]", "[S(1)]", "all_to_all", {"dim", "to_dim"}, {{"dim", 0}, {"to_dim", 1}}},
      {"[R]", "[S(1)]", "local_slice", {"dim"}, {{"dim", 1}, {"group", {0}}}},
      {"[R]", "[P(max)]", "local_partial", {"op"}, {{"op", "max"}}},
      {"[S(0)]", "[P(sum)]", "shard_to_partial", {"dim"}, {{"dim", 0}}},
      {"[P(sum)]", "[P(avg)]", "rescale", {"op", "to_op"}, {{"op", "sum"}, {"to_op", "avg"}}},
  };
  const Mesh mesh({4});
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(row.from) + " -> " + row.to);
    // The bytes planner: one step of each kind (the time planner may take a send_recv).
    ReshardOptions bytes;
    bytes.objective = ReshardObjective::kBytes;
    const json j = ToJson(PlanReshard(mesh, P(row.from), mesh, P(row.to), {8, 8}, DType::kFloat32, bytes));
    ASSERT_EQ(j["steps"].size(), 1u);
    const json& step = j["steps"][0];
    EXPECT_EQ(step["kind"], row.kind);
    std::set<std::string> want = {"kind", "group", "before", "after", "bytes_per_rank", "messages", "seconds"};
    want.insert(row.fields.begin(), row.fields.end());
    EXPECT_EQ(Keys(step), want);
    for (const auto& [key, value] : row.values.items()) EXPECT_EQ(step[key], value) << key;
    EXPECT_EQ(step["before"], row.from);
    EXPECT_EQ(step["after"], row.to);
  }
  // A move between meshes: one send_recv, no group.
  const json move = ToJson(PlanReshard(mesh, P("[S(0)]"), Mesh({2}, {4, 5}), P("[S(0)]"),
                                       {8, 8}, DType::kFloat32));
  ASSERT_EQ(move["steps"].size(), 1u);
  EXPECT_EQ(move["steps"][0]["kind"], "send_recv");
  EXPECT_EQ(move["steps"][0]["group"], json::array());
  EXPECT_EQ(move["steps"][0]["between_meshes"], true);
}

TEST(PlanJsonTest, RatioIsNullWhenOnlyTheBoundIsZero) {
  ReshardPlan plan;
  plan.bytes_per_rank = 8;
  plan.lower_bound_bytes = 0;
  EXPECT_TRUE(ToJson(plan)["ratio"].is_null());
}

}  // namespace
}  // namespace spmd::io
