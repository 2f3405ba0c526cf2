// Mesh: an N-d array of process ids (Paddle's ProcessMesh).
//
// Constraints:
// - 1 to 4 axes, each of size >= 1, at most kMaxMeshRanks ranks in all;
// - process_ids has prod(shape) distinct entries >= 0, in row-major order of coordinates
//   (any permutation of any ids: not only 0..n-1);
// - axis_names is empty or has one distinct name per axis.
#pragma once

#include <cstdint>
#include <memory>
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

  int ndim() const { return static_cast<int>(d().shape.size()); }
  int64_t size() const { return static_cast<int64_t>(d().process_ids.size()); }
  int64_t axis_size(int axis) const { return d().shape[axis]; }
  const std::vector<int64_t>& shape() const { return d().shape; }
  const std::vector<int64_t>& process_ids() const { return d().process_ids; }
  const std::vector<std::string>& axis_names() const { return d().axis_names; }

  // Returns the coordinate (one entry per axis) of `process_id`, or nothing if it is not
  // in the mesh. O(log n): planners call it once per rank.
  std::optional<std::vector<int64_t>> CoordinateOf(int64_t process_id) const;
  // Whether `process_id` is in the mesh (CoordinateOf(...).has_value(), allocating nothing).
  bool Contains(int64_t process_id) const;
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

  // Equal shapes, ids and names (a copy of the same mesh compares by address first).
  bool operator==(const Mesh& other) const;

 private:
  // What a mesh is, immutable once made and shared by its copies: a Mesh is copied with
  // every DistTensor, plan and dispatch, and a copy is one reference count, not four
  // vectors.
  struct Data {
    std::vector<int64_t> shape;
    std::vector<int64_t> process_ids;
    std::vector<std::string> axis_names;
    // (process id, row-major position) sorted by id: CoordinateOf's index, derived from
    // process_ids.
    std::vector<std::pair<int64_t, int64_t>> id_index;
  };
  static const Data& Empty();  // a default-constructed mesh's
  const Data& d() const { return data_ ? *data_ : Empty(); }

  std::shared_ptr<const Data> data_;
};

// Prints `mesh[2,3] ids=[0,1,2,3,4,5]` (names appended as `names=[dp,mp]` when present).
std::string ToString(const Mesh& mesh);

}  // namespace spmd
