#include "rules/model/mesh.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "rules/model/error.h"
#include "rules/model/model_test_util.h"

namespace spmd {
namespace {

using spmd::testing::ExpectInvalid;
using spmd::testing::Shuffled;



// A mesh of 1-4 axes of size 1-4 whose ids are a shuffled, sparse set (not 0..n-1).
Mesh GenMesh() {
  const auto shape = *rc::gen::container<std::vector<int64_t>>(
      *rc::gen::inRange(1, kMaxMeshAxes + 1), rc::gen::inRange<int64_t>(1, 5));
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  std::vector<int64_t> ids(total);
  for (int64_t i = 0; i < total; ++i) ids[i] = 3 * i + 7;
  return Mesh(shape, Shuffled(ids));
}

// Every coordinate of `mesh`, row-major.
std::vector<std::vector<int64_t>> AllCoords(const Mesh& mesh) {
  std::vector<std::vector<int64_t>> coords;
  for (int64_t id : mesh.process_ids()) coords.push_back(*mesh.CoordinateOf(id));
  return coords;
}

TEST(MeshTest, DefaultIdsAreRowMajor) {
  const Mesh mesh({2, 3});
  EXPECT_EQ(mesh.ndim(), 2);
  EXPECT_EQ(mesh.size(), 6);
  EXPECT_EQ(mesh.axis_size(1), 3);
  EXPECT_EQ(mesh.process_ids(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(mesh.ProcessIdAt({1, 2}), 5);
  EXPECT_EQ(mesh.CoordinateOf(4), (std::vector<int64_t>{1, 1}));
}

TEST(MeshTest, PermutedIds) {
  const Mesh mesh({2, 2}, {7, 3, 9, 0});
  EXPECT_EQ(mesh.ProcessIdAt({0, 1}), 3);
  EXPECT_EQ(mesh.ProcessIdAt({1, 1}), 0);
  EXPECT_EQ(mesh.CoordinateOf(9), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(mesh.CoordinateOf(1), std::nullopt);
  EXPECT_EQ(mesh.CoordinateOf(-1), std::nullopt);
}

TEST(MeshTest, GroupOf) {
  const Mesh mesh({2, 3});
  EXPECT_EQ(mesh.GroupOf({1, 0}, {1}), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(mesh.GroupOf({1, 2}, {0}), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(mesh.GroupOf({0, 0}, {0, 1}), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  // Axis 1 major, axis 0 minor.
  EXPECT_EQ(mesh.GroupOf({0, 0}, {1, 0}), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(mesh.GroupOf({1, 1}, {}), (std::vector<int64_t>{4}));
  // Entries on the varied axes are ignored.
  EXPECT_EQ(mesh.GroupOf({1, -1}, {1}), (std::vector<int64_t>{3, 4, 5}));
}

TEST(MeshTest, SubMesh) {
  const Mesh mesh({2, 3}, {}, {"dp", "mp"});
  EXPECT_EQ(mesh.SubMesh({1, -1}, {1}), Mesh({3}, {3, 4, 5}, {"mp"}));
  EXPECT_EQ(mesh.SubMesh({0, 0}, {1, 0}), Mesh({3, 2}, {0, 3, 1, 4, 2, 5}, {"mp", "dp"}));
  EXPECT_EQ(Mesh({2, 3}).SubMesh({-1, 2}, {0}), Mesh({2}, {2, 5}));
}

TEST(MeshTest, Print) {
  EXPECT_EQ(ToString(Mesh({2, 3})), "mesh[2,3] ids=[0,1,2,3,4,5]");
  EXPECT_EQ(ToString(Mesh({2}, {5, 1}, {"dp"})), "mesh[2] ids=[5,1] names=[dp]");
}

TEST(MeshTest, BadMeshes) {
  ExpectInvalid([] { Mesh(std::vector<int64_t>{}); }, "mesh_shape");
  ExpectInvalid([] { Mesh({1, 1, 1, 1, 1}); }, "mesh_shape");
  ExpectInvalid([] { Mesh({2, 0}); }, "mesh_shape");
  ExpectInvalid([] { Mesh({-2}); }, "mesh_shape");
  ExpectInvalid([] { Mesh({1 << 11, 1 << 11}); }, "mesh_shape");
  ExpectInvalid([] { Mesh({int64_t{1} << 40, int64_t{1} << 40}); }, "mesh_shape");
  ExpectInvalid([] { Mesh({2, 2}, {0, 1, 2}); }, "process_ids");
  ExpectInvalid([] { Mesh({2}, {0, 0}); }, "process_ids");
  ExpectInvalid([] { Mesh({2}, {0, -1}); }, "process_ids");
  ExpectInvalid([] { Mesh({2, 2}, {}, {"x"}); }, "axis_names");
  ExpectInvalid([] { Mesh({2, 2}, {}, {"x", "x"}); }, "axis_names");
  ExpectInvalid([] { Mesh({2}, {}, {""}); }, "axis_names");
}

TEST(MeshTest, BadQueries) {
  const Mesh mesh({2, 3});
  ExpectInvalid([&] { mesh.ProcessIdAt({1}); }, "coord");
  ExpectInvalid([&] { mesh.ProcessIdAt({2, 0}); }, "coord");
  ExpectInvalid([&] { mesh.ProcessIdAt({0, -1}); }, "coord");
  ExpectInvalid([&] { mesh.GroupOf({0, 0}, {2}); }, "axes");
  ExpectInvalid([&] { mesh.GroupOf({0, 0}, {1, 1}); }, "axes");
  ExpectInvalid([&] { mesh.GroupOf({5, 0}, {1}); }, "coord");
  ExpectInvalid([&] { mesh.SubMesh({0, 0}, {}); }, "axes");
  ExpectInvalid([] { Mesh().ProcessIdAt({}); }, "coord");
}

RC_GTEST_PROP(MeshProp, CoordinateAndProcessIdAreInverse, ()) {
  const Mesh mesh = GenMesh();
  for (int64_t id : mesh.process_ids()) {
    const auto coord = mesh.CoordinateOf(id);
    RC_ASSERT(coord.has_value());
    RC_ASSERT(mesh.ProcessIdAt(*coord) == id);
  }
}

// The groups of one axis set partition the mesh, and each is its SubMesh's id list.
RC_GTEST_PROP(MeshProp, GroupsPartitionTheMesh, ()) {
  const Mesh mesh = GenMesh();
  std::vector<int> all_axes(mesh.ndim());
  for (int a = 0; a < mesh.ndim(); ++a) all_axes[a] = a;
  std::vector<int> axes;
  for (int a : Shuffled(all_axes)) {
    if (*rc::gen::arbitrary<bool>()) axes.push_back(a);
  }
  int64_t group_size = 1;
  for (int a : axes) group_size *= mesh.axis_size(a);

  std::set<std::vector<int64_t>> groups;
  for (const auto& coord : AllCoords(mesh)) {
    const std::vector<int64_t> group = mesh.GroupOf(coord, axes);
    RC_ASSERT(static_cast<int64_t>(group.size()) == group_size);
    RC_ASSERT(std::count(group.begin(), group.end(), mesh.ProcessIdAt(coord)) == 1);
    if (!axes.empty()) RC_ASSERT(mesh.SubMesh(coord, axes).process_ids() == group);
    groups.insert(group);
  }
  std::multiset<int64_t> covered;
  for (const auto& group : groups) covered.insert(group.begin(), group.end());
  RC_ASSERT(covered == std::multiset<int64_t>(mesh.process_ids().begin(),
                                              mesh.process_ids().end()));
}

}  // namespace
}  // namespace spmd
