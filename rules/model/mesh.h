// Mesh: an N-d array of process ids (Paddle's ProcessMesh).
//
// Constraints:
// - 1 to 4 axes, each of size >= 1, at most kMaxMeshRanks ranks in all;
// - process_ids has prod(shape) distinct entries >= 0, in row-major order of coordinates
//   (any permutation of any ids: not only 0..n-1);
// - axis_names is empty or has one distinct name per axis.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spmd {

inline constexpr int kMaxMeshAxes = 4;
// The most ranks a mesh may have. Far above any single tensor's device mesh in use, and
// low enough that a per-rank pass (a plan's bytes, a lower bound, a group listing) stays
// well under a second: a larger mesh is a typo or hostile input, rejected with a typed
// error rather than minutes of work.
inline constexpr int64_t kMaxMeshRanks = int64_t{1} << 16;

class Mesh {
 public:
  Mesh() = default;
  // Throws SpmdError(kInvalidArgument, "mesh_shape" / "process_ids" / "axis_names") when
  // a constraint fails. Empty process_ids means 0..n-1 row-major.
  explicit Mesh(std::vector<int64_t> shape, std::vector<int64_t> process_ids = {},
                std::vector<std::string> axis_names = {});

  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return static_cast<int64_t>(process_ids_.size()); }
  int64_t axis_size(int axis) const { return shape_[axis]; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& process_ids() const { return process_ids_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }

  // Returns the coordinate (one entry per axis) of `process_id`, or nothing if it is not
  // in the mesh. O(log n): planners call it once per rank.
  std::optional<std::vector<int64_t>> CoordinateOf(int64_t process_id) const;
  // Returns the process id at `coord` (one entry per axis, each in range).
  int64_t ProcessIdAt(const std::vector<int64_t>& coord) const;
  // Returns the process ids of the group that varies `axes` (in the given order, major to
  // minor) with the other coordinates fixed to those of `coord`. Example: mesh 2x3 ids
  // 0..5, coord (1, 0), axes {1} -> {3, 4, 5}.
  std::vector<int64_t> GroupOf(const std::vector<int64_t>& coord,
                               const std::vector<int>& axes) const;
  // Returns the sub-mesh keeping `axes` (in that order) at the coordinate `coord` of the
  // dropped ones. Example: mesh 2x3, coord (1, *), axes {1} -> mesh [3] ids {3, 4, 5}.
  Mesh SubMesh(const std::vector<int64_t>& coord, const std::vector<int>& axes) const;

  bool operator==(const Mesh&) const = default;

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> process_ids_;
  std::vector<std::string> axis_names_;
  // (process id, row-major position) sorted by id: CoordinateOf's index, derived from
  // process_ids_.
  std::vector<std::pair<int64_t, int64_t>> id_index_;
};

// Prints `mesh[2,3] ids=[0,1,2,3,4,5]` (names appended as `names=[dp,mp]` when present).
std::string ToString(const Mesh& mesh);

}  // namespace spmd
