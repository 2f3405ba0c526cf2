// Dist attrs: how one tensor is laid out over a mesh (SEMANTICS.md §2).
//
// The canonical form is the dims form: for each tensor dim, the ordered list of mesh axes
// that shard it (major to minor; empty = not sharded), plus the partial map
// {mesh axis -> reduce op}. The mesh itself travels beside the dist attr (every rule call
// and every DistTensor has exactly one mesh), so a DistAttr is validated against a Mesh.
//
// Constraints (Validate):
// - every mesh axis is in [0, mesh.ndim());
// - every mesh axis appears at most once in the whole dist attr: in one dim's list or in
//   the partial map, never both;
// - dims.size() equals the tensor's rank.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rules/model/mesh.h"

namespace spmd {

enum class ReduceOp { kSum, kAvg, kMax, kMin, kProd, kAny, kAll };
std::string_view ToString(ReduceOp op);
std::optional<ReduceOp> ParseReduceOp(std::string_view name);

using AxisList = std::vector<int>;            // mesh axes sharding one dim, major to minor
using PartialMap = std::map<int, ReduceOp>;   // mesh axis -> reduce op

struct DistAttr {
  std::vector<AxisList> dims;  // one entry per tensor dim
  PartialMap partial;

  int rank() const { return static_cast<int>(dims.size()); }
  bool IsReplicated() const;           // no dim sharded and no partial axis
  bool IsPartial() const { return !partial.empty(); }
  // Returns the tensor dim that `axis` shards, or -1.
  int DimOfAxis(int axis) const;
  bool operator==(const DistAttr&) const = default;

  static DistAttr Replicated(int rank) { return DistAttr{std::vector<AxisList>(rank), {}}; }
};

// Throws SpmdError(kInvalidArgument, field + ".dims_mapping[i]" / field + ".partial")
// when a constraint fails. `field` names the tensor, e.g. "inputs[1]".
void Validate(const DistAttr& attr, const Mesh& mesh, int rank, const std::string& field);
// Returns whether Validate accepts `attr` (on a mesh of `mesh_ndim` axes), building no
// text: callers on a hot path check this first and name the field only on failure.
bool IsValid(const DistAttr& attr, int mesh_ndim, int rank);

// Appends an encoding of `attr` to `key` (each list after its length, each number in one
// byte below 255 and in five otherwise): distinct dist attrs give distinct encodings, and
// so do distinct sequences of them appended one after another. For the keys of maps on a
// hot path (a kept `key` is cleared and refilled without allocating).
void AppendKey(std::string& key, const DistAttr& attr);
// The same for a list: its length, then each dist attr's encoding.
void AppendKey(std::string& key, const std::vector<DistAttr>& attrs);

// ---- Placements: one per mesh axis ------------------------------------------------------

struct Placement {
  enum class Kind { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int dim = -1;          // kShard: the tensor dim
  int order = 0;         // kShard: position of this axis in the dim's co-shard list
  ReduceOp reduce = ReduceOp::kSum;  // kPartial
  bool operator==(const Placement&) const = default;
};

// Lossless conversions. ToPlacements gives mesh.ndim() entries.
std::vector<Placement> ToPlacements(const DistAttr& attr, int mesh_ndim);
// Throws SpmdError(kInvalidArgument, "placements") if two axes claim the same co-shard
// position of one dim or positions are not 0..k-1.
DistAttr FromPlacements(const std::vector<Placement>& placements, int rank);

// ---- Paddle's dims mapping -------------------------------------------------------------

// Flat form: -1 or one axis per dim. Throws SpmdError(kInvalidArgument) when a dim has
// more than one axis (use the co-shard form).
std::vector<int64_t> ToFlatDimsMapping(const DistAttr& attr);
// Co-shard form: a list of axes per dim (same as `dims`).
DistAttr FromFlatDimsMapping(const std::vector<int64_t>& dims_mapping,
                             const PartialMap& partial = {});
// Paddle's partial dims: the axes of the partial map (Paddle keeps the reduce op apart).
std::vector<int64_t> PartialDims(const DistAttr& attr);

// ---- Printing (the one printer, used by errors, logs, goldens and the CLI) -------------

// `[S(0), P(sum), R]`; co-shard `[S(0)#0, S(0)#1]`.
std::string ToPlacementString(const DistAttr& attr, int mesh_ndim);
// `dims=[[1],[],[0]] partial={2:sum}`.
std::string ToString(const DistAttr& attr);
// Parses the placement form back (`[S(0), P(sum), R]`, `S(0)#1`, `P` = P(sum)); throws
// SpmdError(kInvalidArgument, field) on bad text.
DistAttr ParsePlacementString(std::string_view text, int rank, const std::string& field);

}  // namespace spmd
