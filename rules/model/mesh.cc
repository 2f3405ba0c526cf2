#include "rules/model/mesh.h"
#include "rules/model/mesh_spec.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "rules/model/error.h"

namespace spmd {
namespace {

std::string JoinInts(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(values[i]);
  }
  return out;
}

// JoinInts for an error message: a hostile mesh_shape of a million entries is shown by its
// first few and its length.
std::string ShortInts(const std::vector<int64_t>& values) {
  constexpr size_t kShown = 8;
  if (values.size() <= kShown) return JoinInts(values);
  return JoinInts({values.begin(), values.begin() + kShown}) + ",... (" +
         std::to_string(values.size()) + " entries)";
}

// Returns prod(shape) after checking the mesh_shape constraints.
int64_t CheckShape(const std::vector<int64_t>& shape) {
  if (shape.empty() || static_cast<int>(shape.size()) > kMaxMeshAxes) {
    ThrowInvalid("mesh_shape", "a mesh has 1 to " + std::to_string(kMaxMeshAxes) +
                                   " axes, got [" + ShortInts(shape) + "]");
  }
  int64_t total = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      ThrowInvalid("mesh_shape", "axis " + std::to_string(i) + " has size " +
                                     std::to_string(shape[i]) + "; every axis needs size >= 1");
    }
    // Checked before multiplying: total <= kMaxMeshRanks and shape[i] <= kMaxMeshRanks
    // cannot overflow, and anything larger is rejected anyway.
    if (shape[i] > kMaxMeshRanks || total * shape[i] > kMaxMeshRanks) {
      ThrowInvalid("mesh_shape", "[" + ShortInts(shape) + "] has more than " +
                                     std::to_string(kMaxMeshRanks) + " ranks");
    }
    total *= shape[i];
  }
  return total;
}

// Checks the ids and returns the index (id, position) sorted by id.
std::vector<std::pair<int64_t, int64_t>> CheckProcessIds(const std::vector<int64_t>& ids,
                                                         int64_t total) {
  if (static_cast<int64_t>(ids.size()) != total) {
    ThrowInvalid("process_ids", "has " + std::to_string(ids.size()) +
                                    " entries, the mesh shape needs " + std::to_string(total));
  }
  std::vector<std::pair<int64_t, int64_t>> index;
  index.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) {
      ThrowInvalid("process_ids", "entry " + std::to_string(i) + " is " +
                                      std::to_string(ids[i]) + "; ids must be >= 0");
    }
    index.emplace_back(ids[i], static_cast<int64_t>(i));
  }
  std::sort(index.begin(), index.end());
  for (size_t i = 1; i < index.size(); ++i) {
    if (index[i].first == index[i - 1].first) {
      ThrowInvalid("process_ids", "id " + std::to_string(index[i].first) + " appears twice");
    }
  }
  return index;
}

void CheckAxisNames(const std::vector<std::string>& names, size_t ndim) {
  if (names.empty()) return;
  if (names.size() != ndim) {
    ThrowInvalid("axis_names", "has " + std::to_string(names.size()) +
                                   " names for a mesh of " + std::to_string(ndim) + " axes");
  }
  std::set<std::string> seen;
  for (const std::string& name : names) {
    // An empty name would print as nothing and could not name an axis in an error.
    if (name.empty()) ThrowInvalid("axis_names", "a name is empty");
    if (!seen.insert(name).second) ThrowInvalid("axis_names", "'" + name + "' appears twice");
  }
}

void CheckCoordArity(const std::vector<int64_t>& coord, const std::vector<int64_t>& shape) {
  // A default-constructed mesh has no ranks, so no coordinate addresses one.
  if (shape.empty()) ThrowInvalid("coord", "the mesh is empty");
  if (coord.size() != shape.size()) {
    ThrowInvalid("coord", "has " + std::to_string(coord.size()) + " entries for a mesh of " +
                              std::to_string(shape.size()) + " axes");
  }
}

}  // namespace

Mesh::Mesh(std::vector<int64_t> shape, std::vector<int64_t> process_ids,
           std::vector<std::string> axis_names) {
  auto data = std::make_shared<Data>();
  data->shape = std::move(shape);
  data->process_ids = std::move(process_ids);
  data->axis_names = std::move(axis_names);
  const int64_t total = CheckShape(data->shape);
  if (data->process_ids.empty()) {
    data->process_ids.resize(total);
    for (int64_t i = 0; i < total; ++i) data->process_ids[i] = i;
  }
  data->id_index = CheckProcessIds(data->process_ids, total);
  CheckAxisNames(data->axis_names, data->shape.size());
  data_ = std::move(data);
}

const Mesh::Data& Mesh::Empty() {
  static const Data kEmpty;
  return kEmpty;
}

bool Mesh::operator==(const Mesh& other) const {
  if (data_ == other.data_) return true;
  const Data& a = d();
  const Data& b = other.d();
  return a.shape == b.shape && a.process_ids == b.process_ids && a.axis_names == b.axis_names;
}

std::optional<std::vector<int64_t>> Mesh::CoordinateOf(int64_t process_id) const {
  const auto it = std::lower_bound(d().id_index.begin(), d().id_index.end(),
                                   std::pair<int64_t, int64_t>{process_id, 0});
  if (it == d().id_index.end() || it->first != process_id) return std::nullopt;
  int64_t linear = it->second;
  std::vector<int64_t> coord(d().shape.size());
  for (int axis = ndim() - 1; axis >= 0; --axis) {  // row-major: last axis varies fastest
    coord[axis] = linear % d().shape[axis];
    linear /= d().shape[axis];
  }
  return coord;
}

bool Mesh::Contains(int64_t process_id) const {
  const auto it = std::lower_bound(d().id_index.begin(), d().id_index.end(),
                                   std::pair<int64_t, int64_t>{process_id, 0});
  return it != d().id_index.end() && it->first == process_id;
}

int64_t Mesh::ProcessIdAt(const std::vector<int64_t>& coord) const {
  CheckCoordArity(coord, d().shape);
  int64_t linear = 0;
  for (int axis = 0; axis < ndim(); ++axis) {
    if (coord[axis] < 0 || coord[axis] >= d().shape[axis]) {
      ThrowInvalid("coord", "entry " + std::to_string(axis) + " is " +
                                std::to_string(coord[axis]) + ", axis size is " +
                                std::to_string(d().shape[axis]));
    }
    linear = linear * d().shape[axis] + coord[axis];
  }
  return d().process_ids[linear];
}

std::vector<int64_t> Mesh::GroupOf(const std::vector<int64_t>& coord,
                                   const std::vector<int>& axes) const {
  std::vector<bool> varied(d().shape.size(), false);
  for (int axis : axes) {
    if (axis < 0 || axis >= ndim()) {
      ThrowInvalid("axes", "axis " + std::to_string(axis) + " is not in [0, " +
                               std::to_string(ndim()) + ")");
    }
    if (varied[axis]) ThrowInvalid("axes", "axis " + std::to_string(axis) + " appears twice");
    varied[axis] = true;
  }
  // The entries of `coord` on the varied axes are overwritten, so callers may pass any
  // value there (e.g. -1 as a wildcard); the others are checked by ProcessIdAt.
  CheckCoordArity(coord, d().shape);
  std::vector<int64_t> at = coord;
  for (int axis : axes) at[axis] = 0;

  std::vector<int64_t> group;
  while (true) {
    group.push_back(ProcessIdAt(at));
    // Odometer over `axes`, the last listed axis varying fastest (major to minor).
    int k = static_cast<int>(axes.size()) - 1;
    for (; k >= 0; --k) {
      if (++at[axes[k]] < d().shape[axes[k]]) break;
      at[axes[k]] = 0;
    }
    if (k < 0) return group;
  }
}

Mesh Mesh::SubMesh(const std::vector<int64_t>& coord, const std::vector<int>& axes) const {
  if (axes.empty()) ThrowInvalid("axes", "a sub-mesh keeps at least one axis");
  std::vector<int64_t> ids = GroupOf(coord, axes);  // validates coord and axes
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  for (int axis : axes) {
    shape.push_back(d().shape[axis]);
    if (!d().axis_names.empty()) names.push_back(d().axis_names[axis]);
  }
  return Mesh(std::move(shape), std::move(ids), std::move(names));
}

std::string ToString(const Mesh& mesh) {
  std::string out =
      "mesh[" + JoinInts(mesh.shape()) + "] ids=[" + JoinInts(mesh.process_ids()) + "]";
  if (!mesh.axis_names().empty()) {
    out += " names=[";
    for (size_t i = 0; i < mesh.axis_names().size(); ++i) {
      if (i > 0) out += ",";
      out += mesh.axis_names()[i];
    }
    out += "]";
  }
  return out;
}

Mesh ParseMeshSpec(const std::string& spec) {
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      ThrowInvalid("mesh", "'" + item + "' is not name=size (e.g. dp=2,tp=2)");
    }
    const std::string size_text = item.substr(eq + 1);
    if (size_text.empty() || size_text.size() > 6 ||
        size_text.find_first_not_of("0123456789") != std::string::npos) {
      ThrowInvalid("mesh", "'" + size_text + "' is not a size");
    }
    names.push_back(item.substr(0, eq));
    sizes.push_back(std::stoll(size_text));
  }
  if (sizes.empty()) ThrowInvalid("mesh", "no axes");
  return Mesh(sizes, {}, names);
}

}  // namespace spmd
