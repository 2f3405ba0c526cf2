#include "rules/model/layout.h"

#include <algorithm>
#include <string>

#include "rules/model/error.h"

namespace spmd {
namespace {

void CheckCoord(const Mesh& mesh, const std::vector<int64_t>& coord) {
  if (static_cast<int>(coord.size()) != mesh.ndim()) {
    ThrowInvalid("coord", "has " + std::to_string(coord.size()) + " entries for a mesh of " +
                              std::to_string(mesh.ndim()) + " axes");
  }
  for (int axis = 0; axis < mesh.ndim(); ++axis) {
    if (coord[axis] < 0 || coord[axis] >= mesh.axis_size(axis)) {
      ThrowInvalid("coord", "entry " + std::to_string(axis) + " is " +
                                std::to_string(coord[axis]) + ", axis size is " +
                                std::to_string(mesh.axis_size(axis)));
    }
  }
}

// Sizes must be known, and the dist attr valid: an axis used twice has no defined shard.
void CheckTensor(const std::vector<int64_t>& global_shape, const DistAttr& attr,
                 const Mesh& mesh) {
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (global_shape[d] < 0) {
      ThrowInvalid("shape[" + std::to_string(d) + "]",
                   "size " + std::to_string(global_shape[d]) + " is not known or negative");
    }
  }
  Validate(attr, mesh, static_cast<int>(global_shape.size()), "");
}

}  // namespace

Range ChunkOf(int64_t size, int64_t parts, int64_t index) {
  if (parts <= 0) ThrowInvalid("parts", std::to_string(parts) + " parts; need >= 1");
  if (size < 0) ThrowInvalid("size", std::to_string(size) + " is negative");
  if (index < 0 || index >= parts) {
    ThrowInvalid("index", std::to_string(index) + " is not in [0, " + std::to_string(parts) +
                              ")");
  }
  return ChunkOfUnchecked(size, parts, index);
}

Range DimRangeAt(int64_t dim_size, const AxisList& axes, const Mesh& mesh,
                 const std::vector<int64_t>& coord) {
  CheckCoord(mesh, coord);
  if (dim_size < 0) ThrowInvalid("dim_size", std::to_string(dim_size) + " is negative");
  for (int axis : axes) {
    if (axis < 0 || axis >= mesh.ndim()) {
      ThrowInvalid("axes", "mesh axis " + std::to_string(axis) + " is not in [0, " +
                               std::to_string(mesh.ndim()) + ")");
    }
  }
  return DimRangeAtUnchecked(dim_size, axes, mesh, coord);
}

std::vector<int64_t> LocalShape(const std::vector<int64_t>& global_shape, const DistAttr& attr,
                                const Mesh& mesh, const std::vector<int64_t>& coord) {
  CheckTensor(global_shape, attr, mesh);
  std::vector<int64_t> local(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    local[d] = DimRangeAt(global_shape[d], attr.dims[d], mesh, coord).size();
  }
  return local;
}

std::vector<int64_t> GlobalOffset(const std::vector<int64_t>& global_shape,
                                  const DistAttr& attr, const Mesh& mesh,
                                  const std::vector<int64_t>& coord) {
  CheckTensor(global_shape, attr, mesh);
  std::vector<int64_t> offset(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    offset[d] = DimRangeAt(global_shape[d], attr.dims[d], mesh, coord).begin;
  }
  return offset;
}

Box BoxAt(const std::vector<int64_t>& global_shape, const DistAttr& attr, const Mesh& mesh,
          const std::vector<int64_t>& coord) {
  if (attr.dims.size() != global_shape.size()) {
    ThrowInvalid("attr", "has " + std::to_string(attr.dims.size()) + " dims for a rank-" +
                             std::to_string(global_shape.size()) + " shape");
  }
  Box box(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    box[d] = DimRangeAt(global_shape[d], attr.dims[d], mesh, coord);
  }
  return box;
}

Box Intersect(const Box& a, const Box& b) {
  if (a.size() != b.size()) {
    ThrowInvalid("box", "rank " + std::to_string(a.size()) + " meets rank " +
                            std::to_string(b.size()));
  }
  Box out(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    const int64_t begin = std::max(a[d].begin, b[d].begin);
    out[d] = Range{begin, std::max(begin, std::min(a[d].end, b[d].end))};
  }
  return out;
}

int64_t Volume(const Box& box) {
  int64_t v = 1;
  for (const Range& r : box) v *= r.size();
  return v;
}

Box RelativeTo(const Box& box, const Box& origin) {
  if (box.size() != origin.size()) {
    ThrowInvalid("box", "rank " + std::to_string(box.size()) + " relative to rank " +
                            std::to_string(origin.size()));
  }
  Box out(box.size());
  for (size_t d = 0; d < box.size(); ++d) {
    out[d] = Range{box[d].begin - origin[d].begin, box[d].end - origin[d].begin};
  }
  return out;
}

std::vector<int64_t> SizesOf(const Box& box) {
  std::vector<int64_t> sizes;
  sizes.reserve(box.size());
  for (const Range& r : box) sizes.push_back(r.size());
  return sizes;
}

std::vector<int64_t> BeginsOf(const Box& box) {
  std::vector<int64_t> begins;
  begins.reserve(box.size());
  for (const Range& r : box) begins.push_back(r.begin);
  return begins;
}

}  // namespace spmd
