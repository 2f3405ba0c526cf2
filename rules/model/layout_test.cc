#include "rules/model/layout.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <limits>

#include "rules/model/error.h"
#include "rules/model/model_test_util.h"

namespace spmd {
namespace {

using spmd::testing::ExpectInvalid;
using spmd::testing::Shuffled;



std::vector<int64_t> ChunkSizes(int64_t size, int64_t parts) {
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < parts; ++i) sizes.push_back(ChunkOf(size, parts, i).size());
  return sizes;
}

Mesh GenMesh() {
  return Mesh(*rc::gen::container<std::vector<int64_t>>(*rc::gen::inRange(1, kMaxMeshAxes + 1),
                                                        rc::gen::inRange<int64_t>(1, 5)));
}

DistAttr GenDistAttr(int mesh_ndim, int rank) {
  return testing::GenDistAttr(mesh_ndim, rank, {ReduceOp::kSum});
}

std::vector<std::vector<int64_t>> AllCoords(const Mesh& mesh) {
  std::vector<std::vector<int64_t>> coords;
  for (int64_t id : mesh.process_ids()) coords.push_back(*mesh.CoordinateOf(id));
  return coords;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

TEST(LayoutTest, ChunkOfCeilLayout) {
  EXPECT_EQ(ChunkSizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(ChunkSizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(ChunkSizes(1, 2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ChunkSizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(ChunkSizes(3, 5), (std::vector<int64_t>{1, 1, 1, 0, 0}));
  EXPECT_EQ(ChunkSizes(8, 1), (std::vector<int64_t>{8}));
  EXPECT_EQ(ChunkOf(10, 4, 3), (Range{9, 10}));
  EXPECT_EQ(ChunkOf(5, 4, 3), (Range{5, 5}));
  EXPECT_EQ(ChunkOf(0, 2, 1), (Range{0, 0}));
}

TEST(LayoutTest, ChunkOfHugeSizesDoNotOverflow) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ChunkOf(big, 2, 1).end, big);
  EXPECT_EQ(ChunkOf(big, 3, 2).end, big);
  EXPECT_EQ(ChunkOf(big, big, big - 1), (Range{big - 1, big}));
}

TEST(LayoutTest, ChunkOfBadArguments) {
  ExpectInvalid([] { ChunkOf(4, 0, 0); }, "parts");
  ExpectInvalid([] { ChunkOf(4, -2, 0); }, "parts");
  ExpectInvalid([] { ChunkOf(-1, 2, 0); }, "size");
  ExpectInvalid([] { ChunkOf(4, 2, 2); }, "index");
  ExpectInvalid([] { ChunkOf(4, 2, -1); }, "index");
}

TEST(LayoutTest, CoShardSplitsTheParentChunk) {
  const Mesh mesh({2, 3});
  // Axis 0 first: 10 -> 5,5; then axis 1 splits each 5 into 2,2,1.
  EXPECT_EQ(DimRangeAt(10, {0, 1}, mesh, {1, 2}), (Range{9, 10}));
  EXPECT_EQ(DimRangeAt(10, {0, 1}, mesh, {0, 1}), (Range{2, 4}));
  // Axis 1 first: 10 -> 4,4,2; then axis 0 splits each in two.
  EXPECT_EQ(DimRangeAt(10, {1, 0}, mesh, {1, 2}), (Range{9, 10}));
  EXPECT_EQ(DimRangeAt(10, {1, 0}, mesh, {1, 1}), (Range{6, 8}));
  EXPECT_EQ(DimRangeAt(10, {}, mesh, {1, 1}), (Range{0, 10}));
  // Empty parents stay empty.
  EXPECT_EQ(DimRangeAt(1, {0, 1}, mesh, {1, 0}), (Range{1, 1}));
}

TEST(LayoutTest, LocalShapeAndOffset) {
  const Mesh mesh({2, 3});
  const DistAttr attr{{{1}, {}, {0}}, {}};
  EXPECT_EQ(LocalShape({7, 4, 3}, attr, mesh, {1, 2}), (std::vector<int64_t>{1, 4, 1}));
  EXPECT_EQ(GlobalOffset({7, 4, 3}, attr, mesh, {1, 2}), (std::vector<int64_t>{6, 0, 2}));
  // Partial axes do not change the shape.
  const DistAttr partial{{{}, {1}}, {{0, ReduceOp::kSum}}};
  EXPECT_EQ(LocalShape({4, 6}, partial, mesh, {1, 1}), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(LocalShape({}, DistAttr::Replicated(0), mesh, {0, 0}), std::vector<int64_t>{});
}

TEST(LayoutTest, BadLayoutArguments) {
  const Mesh mesh({2, 3});
  const DistAttr attr{{{1}}, {}};
  ExpectInvalid([&] { LocalShape({4, 4}, attr, mesh, {0, 0}); }, "dims_mapping");
  ExpectInvalid([&] { LocalShape({-1}, attr, mesh, {0, 0}); }, "shape[0]");
  ExpectInvalid([&] { LocalShape({4}, DistAttr{{{2}}, {}}, mesh, {0, 0}); }, "dims_mapping[0]");
  ExpectInvalid([&] { LocalShape({4}, attr, mesh, {0}); }, "coord");
  ExpectInvalid([&] { GlobalOffset({4}, attr, mesh, {0, 3}); }, "coord");
  ExpectInvalid([&] { DimRangeAt(4, {2}, mesh, {0, 0}); }, "axes");
  ExpectInvalid([&] { DimRangeAt(-4, {}, mesh, {0, 0}); }, "dim_size");
}

// @post of ChunkOf: chunks 0..parts-1 tile [0, size) in order, ceil-sized then short.
RC_GTEST_PROP(LayoutProp, ChunksTileTheDim, ()) {
  const int64_t size = *rc::gen::inRange<int64_t>(0, 200);
  const int64_t parts = *rc::gen::inRange<int64_t>(1, 40);
  const int64_t ceil = (size + parts - 1) / parts;
  int64_t next = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const Range chunk = ChunkOf(size, parts, i);
    RC_ASSERT(chunk.begin == next);
    RC_ASSERT(chunk.begin <= chunk.end);
    RC_ASSERT(chunk.end <= size);
    RC_ASSERT(chunk.size() == std::min(ceil, size - chunk.begin));
    next = chunk.end;
  }
  RC_ASSERT(next == size);
}

// Visiting the coordinates of a dim's axes major to minor gives ranges that tile the dim
// in order; the coordinates on the other axes do not matter.
RC_GTEST_PROP(LayoutProp, CoShardRangesTileTheDim, ()) {
  const Mesh mesh = GenMesh();
  const int64_t size = *rc::gen::inRange<int64_t>(0, 50);
  const DistAttr attr = GenDistAttr(mesh.ndim(), 1);
  const AxisList& axes = attr.dims[0];
  const std::vector<int64_t> base = *rc::gen::elementOf(AllCoords(mesh));
  const std::vector<int64_t> group = mesh.GroupOf(base, axes);  // major to minor
  int64_t next = 0;
  for (int64_t id : group) {
    const Range range = DimRangeAt(size, axes, mesh, *mesh.CoordinateOf(id));
    RC_ASSERT(range.begin == next);
    RC_ASSERT(range.end >= range.begin);
    next = range.end;
  }
  RC_ASSERT(next == size);
}

// Summed over every rank, local numels count each element once per replica: the product
// of the sizes of the axes that shard no dim (partial axes included).
RC_GTEST_PROP(LayoutProp, LocalNumelsSumToReplicatedGlobal, ()) {
  const Mesh mesh = GenMesh();
  const auto shape = *rc::gen::container<std::vector<int64_t>>(
      *rc::gen::inRange(0, 4), rc::gen::inRange<int64_t>(0, 9));
  const DistAttr attr = GenDistAttr(mesh.ndim(), static_cast<int>(shape.size()));
  int64_t replicas = 1;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (attr.DimOfAxis(a) < 0) replicas *= mesh.axis_size(a);
  }
  int64_t total = 0;
  for (const auto& coord : AllCoords(mesh)) {
    const std::vector<int64_t> local = LocalShape(shape, attr, mesh, coord);
    const std::vector<int64_t> offset = GlobalOffset(shape, attr, mesh, coord);
    for (size_t d = 0; d < shape.size(); ++d) RC_ASSERT(offset[d] + local[d] <= shape[d]);
    total += Numel(local);
  }
  RC_ASSERT(total == Numel(shape) * replicas);
}

// When the dim divides evenly, co-shard [a, b] is one flat split over n(a) * n(b) ranks
// at index c(a) * n(b) + c(b): co-shard is the flattened group, major to minor.
RC_GTEST_PROP(LayoutProp, EvenCoShardIsAFlatSplit, ()) {
  const Mesh mesh = GenMesh();
  const DistAttr attr = GenDistAttr(mesh.ndim(), 1);
  const AxisList& axes = attr.dims[0];
  int64_t parts = 1;
  for (int a : axes) parts *= mesh.axis_size(a);
  const int64_t size = parts * *rc::gen::inRange<int64_t>(0, 5);
  const std::vector<int64_t> coord = *rc::gen::elementOf(AllCoords(mesh));
  int64_t index = 0;
  for (int a : axes) index = index * mesh.axis_size(a) + coord[a];
  RC_ASSERT(DimRangeAt(size, axes, mesh, coord) == ChunkOf(size, parts, index));
}

// Box primitives against element-by-element counting: a rank's box has the local shape at
// the global offset; the intersection of two ranks' boxes holds exactly the elements both
// hold; a box relative to an origin that holds it lies in the origin's local buffer.
RC_GTEST_PROP(LayoutProp, BoxesMatchElementCounting, ()) {
  const Mesh mesh = GenMesh();
  const auto shape = *rc::gen::container<std::vector<int64_t>>(
      *rc::gen::inRange(0, 4), rc::gen::inRange<int64_t>(0, 7));
  const DistAttr a = GenDistAttr(mesh.ndim(), static_cast<int>(shape.size()));
  const DistAttr b = GenDistAttr(mesh.ndim(), static_cast<int>(shape.size()));
  const std::vector<int64_t> ca = *rc::gen::elementOf(AllCoords(mesh));
  const std::vector<int64_t> cb = *rc::gen::elementOf(AllCoords(mesh));
  const Box box_a = BoxAt(shape, a, mesh, ca);
  const Box box_b = BoxAt(shape, b, mesh, cb);
  RC_ASSERT(SizesOf(box_a) == LocalShape(shape, a, mesh, ca));
  RC_ASSERT(BeginsOf(box_a) == GlobalOffset(shape, a, mesh, ca));
  RC_ASSERT(Volume(box_a) == Numel(LocalShape(shape, a, mesh, ca)));
  const Box both = Intersect(box_a, box_b);
  auto inside = [](const Box& box, const std::vector<int64_t>& idx) {
    for (size_t d = 0; d < idx.size(); ++d) {
      if (idx[d] < box[d].begin || idx[d] >= box[d].end) return false;
    }
    return true;
  };
  int64_t common = 0;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < Numel(shape); ++i) {
    int64_t rest = i;
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = rest % shape[d];
      rest /= shape[d];
    }
    const bool in_both = inside(box_a, idx) && inside(box_b, idx);
    RC_ASSERT(inside(both, idx) == in_both);
    common += in_both ? 1 : 0;
  }
  RC_ASSERT(Volume(both) == common);
  const Box rel = RelativeTo(both, box_a);
  RC_ASSERT(SizesOf(rel) == SizesOf(both));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (both[d].size() == 0) continue;
    RC_ASSERT(rel[d].begin >= 0);
    RC_ASSERT(rel[d].end <= box_a[d].size());
  }
}

TEST(LayoutTest, BoxBadArguments) {
  const Mesh mesh({2});
  ExpectInvalid([&] { BoxAt({4, 4}, DistAttr{{{0}}, {}}, mesh, {0}); }, "attr");
  ExpectInvalid([&] { Intersect({Range{0, 1}}, {}); }, "box");
  ExpectInvalid([&] { RelativeTo({Range{0, 1}}, {}); }, "box");
  EXPECT_EQ(Volume({}), 1);
  EXPECT_EQ(Intersect({Range{0, 2}, Range{3, 5}}, {Range{1, 4}, Range{6, 8}}),
            (Box{Range{1, 2}, Range{6, 6}}));
}

}  // namespace
}  // namespace spmd
