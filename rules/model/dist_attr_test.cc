#include "rules/model/dist_attr.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "rules/model/error.h"
#include "rules/model/model_test_util.h"

namespace spmd {
namespace {

using spmd::testing::ExpectInvalid;
using spmd::testing::Shuffled;



const std::vector<ReduceOp> kAllReduceOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                             ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kAny,
                                             ReduceOp::kAll};

DistAttr GenDistAttr(int mesh_ndim, int rank) {
  return testing::GenDistAttr(mesh_ndim, rank, kAllReduceOps);
}

// Every dist attr of rank 0 to 3 on three axes (each axis R, S(d) or P(sum / max), both
// orders of a co-shard of two), and some beyond any mesh (axis 300, 70000, -1).
std::vector<DistAttr> ManyDistAttrs() {
  std::vector<DistAttr> attrs;
  for (int rank = 0; rank <= 3; ++rank) {
    const int options = 1 + rank + 2;
    for (int code = 0; code < options * options * options; ++code) {
      DistAttr attr = DistAttr::Replicated(rank);
      for (int axis = 0, rest = code; axis < 3; ++axis, rest /= options) {
        const int choice = rest % options;
        if (choice >= 1 && choice <= rank) attr.dims[choice - 1].push_back(axis);
        if (choice == rank + 1) attr.partial[axis] = ReduceOp::kSum;
        if (choice == rank + 2) attr.partial[axis] = ReduceOp::kMax;
      }
      attrs.push_back(attr);
      for (int d = 0; d < rank; ++d) {
        if (attr.dims[d].size() != 2) continue;
        DistAttr swapped = attr;
        std::swap(swapped.dims[d][0], swapped.dims[d][1]);
        attrs.push_back(swapped);
      }
    }
  }
  for (int axis : {300, 70000, -1, 255, 254}) {
    attrs.push_back(DistAttr{{{axis}}, {}});
    attrs.push_back(DistAttr{{{}}, {{axis, ReduceOp::kSum}}});
  }
  return attrs;
}

TEST(DistAttrTest, KeysOfDistinctDistAttrsAreDistinct) {
  const std::vector<DistAttr> attrs = ManyDistAttrs();
  std::map<std::string, DistAttr> seen;
  for (const DistAttr& attr : attrs) {
    std::string key;
    AppendKey(key, attr);
    auto [it, fresh] = seen.emplace(key, attr);
    EXPECT_TRUE(fresh || it->second == attr) << ToString(attr) << " and " << ToString(it->second);
  }
  EXPECT_GT(seen.size(), 500u);
  // Lists one after another (a rule's inputs, then its outputs): distinct pairs of lists of
  // 0 to 2 dist attrs, distinct keys.
  std::vector<std::vector<DistAttr>> lists = {{}};
  for (size_t a = 0; a < 12; ++a) {
    lists.push_back({attrs[a * 37 % attrs.size()]});
    for (size_t b = 0; b < 12; ++b) lists.push_back({attrs[a * 37 % attrs.size()], attrs[b * 53 % attrs.size()]});
  }
  std::map<std::string, std::pair<size_t, size_t>> pairs;
  for (size_t x = 0; x < lists.size(); ++x) {
    for (size_t y = 0; y < lists.size(); ++y) {
      std::string key;
      AppendKey(key, lists[x]);
      AppendKey(key, lists[y]);
      auto [it, fresh] = pairs.emplace(key, std::pair{x, y});
      EXPECT_TRUE(fresh || (lists[it->second.first] == lists[x] && lists[it->second.second] == lists[y]));
    }
  }
}

TEST(DistAttrTest, ReduceOpNames) {
  for (ReduceOp op : kAllReduceOps) EXPECT_EQ(ParseReduceOp(ToString(op)), op);
  EXPECT_EQ(ToString(ReduceOp::kAvg), "avg");
  EXPECT_EQ(ParseReduceOp("mean"), std::nullopt);
  EXPECT_EQ(ParseReduceOp("SUM"), std::nullopt);
}

TEST(DistAttrTest, Queries) {
  const DistAttr attr{{{1}, {}, {0, 2}}, {{3, ReduceOp::kMax}}};
  EXPECT_FALSE(attr.IsReplicated());
  EXPECT_TRUE(attr.IsPartial());
  EXPECT_EQ(attr.rank(), 3);
  EXPECT_EQ(attr.DimOfAxis(2), 2);
  EXPECT_EQ(attr.DimOfAxis(1), 0);
  EXPECT_EQ(attr.DimOfAxis(3), -1);
  EXPECT_TRUE(DistAttr::Replicated(2).IsReplicated());
  EXPECT_FALSE((DistAttr{{{}, {}}, {{0, ReduceOp::kSum}}}).IsReplicated());
}

TEST(DistAttrTest, Validate) {
  const Mesh mesh({2, 2, 2});
  Validate(DistAttr{{{1}, {}, {0, 2}}, {}}, mesh, 3, "inputs[1]");
  Validate(DistAttr{{{}}, {{0, ReduceOp::kSum}, {2, ReduceOp::kMin}}}, mesh, 1, "x");
  Validate(DistAttr::Replicated(0), mesh, 0, "x");

  ExpectInvalid([&] { Validate(DistAttr::Replicated(2), mesh, 3, "inputs[1]"); },
                "inputs[1].dims_mapping");
  ExpectInvalid([&] { Validate(DistAttr{{{3}}, {}}, mesh, 1, "inputs[1]"); },
                "inputs[1].dims_mapping[0]");
  ExpectInvalid([&] { Validate(DistAttr{{{-1}}, {}}, mesh, 1, "inputs[1]"); },
                "inputs[1].dims_mapping[0]");
  ExpectInvalid([&] { Validate(DistAttr{{{0}, {}, {1, 0}}, {}}, mesh, 3, "inputs[1]"); },
                "inputs[1].dims_mapping[2]");
  ExpectInvalid([&] { Validate(DistAttr{{{0, 0}}, {}}, mesh, 1, "outputs[0]"); },
                "outputs[0].dims_mapping[0]");
  ExpectInvalid(
      [&] { Validate(DistAttr{{{0}}, {{0, ReduceOp::kSum}}}, mesh, 1, "inputs[1]"); },
      "inputs[1].partial");
  ExpectInvalid(
      [&] { Validate(DistAttr{{{}}, {{5, ReduceOp::kSum}}}, mesh, 1, "inputs[1]"); },
      "inputs[1].partial");
  ExpectInvalid(
      [&] { Validate(DistAttr{{{}}, {{-1, ReduceOp::kSum}}}, mesh, 1, "inputs[1]"); },
      "inputs[1].partial");
}

TEST(DistAttrTest, Placements) {
  const DistAttr attr{{{}, {2, 0}}, {{1, ReduceOp::kMax}}};
  using K = Placement::Kind;
  const std::vector<Placement> expected = {
      {K::kShard, 1, 1, ReduceOp::kSum},
      {K::kPartial, -1, 0, ReduceOp::kMax},
      {K::kShard, 1, 0, ReduceOp::kSum},
      {K::kReplicate, -1, 0, ReduceOp::kSum},
  };
  EXPECT_EQ(ToPlacements(attr, 4), expected);
  EXPECT_EQ(FromPlacements(expected, 2), attr);
  ExpectInvalid([&] { ToPlacements(attr, 2); }, "dims_mapping[1]");
  ExpectInvalid([] { ToPlacements(DistAttr{{{0}, {0}}, {}}, 2); }, "dims_mapping[1]");
}

TEST(DistAttrTest, BadPlacements) {
  using K = Placement::Kind;
  const Placement s0_first{K::kShard, 0, 0, ReduceOp::kSum};
  const Placement s0_second{K::kShard, 0, 1, ReduceOp::kSum};
  const Placement s2{K::kShard, 2, 0, ReduceOp::kSum};
  ExpectInvalid([&] { FromPlacements({s0_first, s0_first}, 1); }, "placements");
  ExpectInvalid([&] { FromPlacements({s0_second}, 1); }, "placements");
  ExpectInvalid([&] { FromPlacements({Placement{}, s2}, 2); }, "placements[1]");
  EXPECT_EQ(FromPlacements({s0_second, s0_first}, 1), (DistAttr{{{1, 0}}, {}}));
}

TEST(DistAttrTest, FlatDimsMapping) {
  const DistAttr attr = FromFlatDimsMapping({1, -1, 0}, {{2, ReduceOp::kSum}});
  EXPECT_EQ(attr, (DistAttr{{{1}, {}, {0}}, {{2, ReduceOp::kSum}}}));
  EXPECT_EQ(ToFlatDimsMapping(attr), (std::vector<int64_t>{1, -1, 0}));
  EXPECT_EQ(PartialDims(attr), (std::vector<int64_t>{2}));
  ExpectInvalid([] { ToFlatDimsMapping(DistAttr{{{}, {0, 1}}, {}}); }, "dims_mapping[1]");
  ExpectInvalid([] { FromFlatDimsMapping({0, -2}); }, "dims_mapping[1]");
  ExpectInvalid([] { FromFlatDimsMapping({int64_t{1} << 40}); }, "dims_mapping[0]");
}

TEST(DistAttrTest, Print) {
  const DistAttr attr{{{1}, {}, {0}}, {{2, ReduceOp::kSum}}};
  EXPECT_EQ(ToString(attr), "dims=[[1],[],[0]] partial={2:sum}");
  EXPECT_EQ(ToPlacementString(attr, 3), "[S(2), S(0), P(sum)]");
  EXPECT_EQ(ToString(DistAttr::Replicated(2)), "dims=[[],[]] partial={}");
  EXPECT_EQ(ToPlacementString(DistAttr::Replicated(2), 2), "[R, R]");
  EXPECT_EQ(ToString(DistAttr{{{0, 1}}, {{2, ReduceOp::kMax}, {3, ReduceOp::kAvg}}}),
            "dims=[[0,1]] partial={2:max,3:avg}");
  EXPECT_EQ(ToPlacementString(DistAttr{{{0, 1}}, {}}, 2), "[S(0)#0, S(0)#1]");
  EXPECT_EQ(ToPlacementString(DistAttr{{{}, {2, 0}}, {}}, 3), "[S(1)#1, R, S(1)#0]");
  EXPECT_EQ(ToPlacementString(DistAttr{{}, {{0, ReduceOp::kProd}}}, 1), "[P(prod)]");
}

TEST(DistAttrTest, Parse) {
  EXPECT_EQ(ParsePlacementString("[S(2), S(0), P(sum)]", 3, "x"),
            (DistAttr{{{1}, {}, {0}}, {{2, ReduceOp::kSum}}}));
  EXPECT_EQ(ParsePlacementString("  [ P , R,P( max ) ] ", 1, "x"),
            (DistAttr{{{}}, {{0, ReduceOp::kSum}, {2, ReduceOp::kMax}}}));
  EXPECT_EQ(ParsePlacementString("[S(1)#1, R, S(1)#0]", 2, "x"), (DistAttr{{{}, {2, 0}}, {}}));
  EXPECT_EQ(ParsePlacementString("[S(0)#0]", 1, "x"), (DistAttr{{{0}}, {}}));
  EXPECT_EQ(ParsePlacementString("[]", 2, "x"), DistAttr::Replicated(2));
}

TEST(DistAttrTest, ParseErrors) {
  for (const char* text : {"", "S(0)", "[S(0)", "[S(0)]]", "[S0]", "[S(-1)]", "[X]",
                           "[P(mean)]", "[R,]", "[S(0)#]", "[S(9999999)]", "[R] x"}) {
    SCOPED_TRACE(text);
    ExpectInvalid([&] { ParsePlacementString(text, 2, "inputs[0].placements"); },
                  "inputs[0].placements");
  }
  ExpectInvalid([] { ParsePlacementString("[S(0), S(0)]", 1, "p"); }, "p");
  ExpectInvalid([] { ParsePlacementString("[S(0)#0, S(0)]", 1, "p"); }, "p");
  ExpectInvalid([] { ParsePlacementString("[S(0)#0, S(0)#0]", 1, "p"); }, "p");
  ExpectInvalid([] { ParsePlacementString("[S(0)#1]", 1, "p"); }, "p");
  ExpectInvalid([] { ParsePlacementString("[R, S(2)]", 2, "p"); }, "p[1]");
}

RC_GTEST_PROP(DistAttrProp, PlacementsRoundTrip, ()) {
  const int mesh_ndim = *rc::gen::inRange(1, kMaxMeshAxes + 1);
  const int rank = *rc::gen::inRange(0, 5);
  const DistAttr attr = GenDistAttr(mesh_ndim, rank);
  RC_ASSERT(FromPlacements(ToPlacements(attr, mesh_ndim), rank) == attr);
}

RC_GTEST_PROP(DistAttrProp, PlacementStringRoundTrip, ()) {
  const int mesh_ndim = *rc::gen::inRange(1, kMaxMeshAxes + 1);
  const int rank = *rc::gen::inRange(0, 5);
  const DistAttr attr = GenDistAttr(mesh_ndim, rank);
  const std::string text = ToPlacementString(attr, mesh_ndim);
  RC_ASSERT(ParsePlacementString(text, rank, "x") == attr);
}

RC_GTEST_PROP(DistAttrProp, FlatDimsMappingRoundTrip, ()) {
  const int mesh_ndim = *rc::gen::inRange(1, kMaxMeshAxes + 1);
  const int rank = *rc::gen::inRange(0, 5);
  const DistAttr attr = GenDistAttr(mesh_ndim, rank);
  bool flat = true;
  for (const AxisList& axes : attr.dims) flat = flat && axes.size() <= 1;
  if (!flat) {
    RC_ASSERT_THROWS_AS(ToFlatDimsMapping(attr), SpmdError);
    return;
  }
  RC_ASSERT(FromFlatDimsMapping(ToFlatDimsMapping(attr), attr.partial) == attr);
  const std::vector<int64_t> partial_dims = PartialDims(attr);
  RC_ASSERT(partial_dims.size() == attr.partial.size());
}

// Generated attrs are valid, and adding any axis a second time makes them invalid.
RC_GTEST_PROP(DistAttrProp, ValidateRejectsAReusedAxis, ()) {
  const Mesh mesh(std::vector<int64_t>(*rc::gen::inRange(1, kMaxMeshAxes + 1), 2));
  const int rank = *rc::gen::inRange(1, 5);
  DistAttr attr = GenDistAttr(mesh.ndim(), rank);
  Validate(attr, mesh, rank, "x");
  std::vector<int> used;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (attr.DimOfAxis(a) >= 0 || attr.partial.count(a)) used.push_back(a);
  }
  if (used.empty()) return;
  const int axis = *rc::gen::elementOf(used);
  // Re-inserting a partial key is no second use, so a partial axis goes into a dim.
  if (attr.partial.count(axis) || *rc::gen::arbitrary<bool>()) {
    attr.dims[*rc::gen::inRange(0, rank)].push_back(axis);
  } else {
    attr.partial[axis] = ReduceOp::kSum;
  }
  RC_ASSERT_THROWS_AS(Validate(attr, mesh, rank, "x"), SpmdError);
}

}  // namespace
}  // namespace spmd
