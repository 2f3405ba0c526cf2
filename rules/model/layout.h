// The uneven ceil layout of SEMANTICS.md §2.2.
//
// Size s over n ranks, c = ceil(s / n): chunk i covers [min(i*c, s), min((i+1)*c, s)).
// Co-shard applies this at each level to the parent chunk. Empty chunks are normal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"

namespace spmd {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive; end >= begin
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// Returns chunk `index` of `size` split over `parts` ranks.
// @post result.begin <= result.end <= size; chunks 0..parts-1 tile [0, size) in order.
Range ChunkOf(int64_t size, int64_t parts, int64_t index);

// Returns the global range of dim `dim` held by the rank at `coord` (a mesh coordinate):
// the dim's axis list applied major to minor.
Range DimRangeAt(int64_t dim_size, const AxisList& axes, const Mesh& mesh,
                 const std::vector<int64_t>& coord);

// ChunkOf and DimRangeAt without their checks, for a caller that has made them (parts >= 1,
// 0 <= index < parts, sizes >= 0; every axis in [0, mesh.ndim()) and `coord` a coordinate
// of `mesh`), once for many calls: the same ranges.
inline Range ChunkOfUnchecked(int64_t size, int64_t parts, int64_t index) {
  const int64_t chunk = size == 0 ? 0 : (size - 1) / parts + 1;  // ceil, overflow-free
  // min(i * chunk, size) without forming a product larger than `size`.
  auto start = [&](int64_t i) { return chunk == 0 || i > size / chunk ? size : std::min(i * chunk, size); };
  return Range{start(index), start(index + 1)};
}
inline Range DimRangeAtUnchecked(int64_t dim_size, const AxisList& axes, const Mesh& mesh,
                                 const std::vector<int64_t>& coord) {
  Range range{0, dim_size};
  for (int axis : axes) {
    // Each axis splits the chunk the previous (more major) axes left.
    const Range chunk = ChunkOfUnchecked(range.size(), mesh.axis_size(axis), coord[axis]);
    range = Range{range.begin + chunk.begin, range.begin + chunk.end};
  }
  return range;
}

// A box: one global range per dim (a rank's shard, a piece in transit, an intersection).
using Box = std::vector<Range>;

// Returns the global box held by the rank at `coord` of `mesh` under `attr`: DimRangeAt on
// every dim.
Box BoxAt(const std::vector<int64_t>& global_shape, const DistAttr& attr, const Mesh& mesh,
          const std::vector<int64_t>& coord);
// Returns the intersection of two boxes of the same rank (an empty range, begin == end, on
// a dim where they do not meet).
Box Intersect(const Box& a, const Box& b);
// Returns the number of elements of `box` (1 for a rank-0 box).
int64_t Volume(const Box& box);
// Returns `box` in the local coordinates of a buffer that holds `origin` (both global):
// every range shifted by origin's begin. Meaningful when box lies inside origin.
Box RelativeTo(const Box& box, const Box& origin);
// Returns the extent (the range sizes) and the begins of `box`, one entry per dim.
std::vector<int64_t> SizesOf(const Box& box);
std::vector<int64_t> BeginsOf(const Box& box);

// Returns the local shape held by the rank at `coord`.
std::vector<int64_t> LocalShape(const std::vector<int64_t>& global_shape, const DistAttr& attr,
                                const Mesh& mesh, const std::vector<int64_t>& coord);
// Returns the global offset of that rank's shard (one entry per dim).
std::vector<int64_t> GlobalOffset(const std::vector<int64_t>& global_shape,
                                  const DistAttr& attr, const Mesh& mesh,
                                  const std::vector<int64_t>& coord);

}  // namespace spmd
