// One step of a reshard plan (SEMANTICS.md §8): what it does is one of nine kinds, each a
// small struct carrying only its own fields and its contract; the common part (meshes,
// dist attrs before and after, bytes) is on ReshardStep. The contracts below are what the
// executor (runtime/exec/reshard_executor.h) implements, exactly; ApplyStep derives `after`
// from `before` as they say.
//
// Vocabulary. A step acts on a *group*: one mesh axis, or several axes treated as one
// flattened axis (row-major over the listed axes, major first). The group of the rank at
// coordinate `c` is the set of ranks whose coordinates differ from `c` only on the group's
// axes; its size `n` is the product of those axes' sizes; a member's *group position* is
// its row-major index over the group's axes. Chunks follow the ceil layout (SEMANTICS.md
// §2.2) at every co-shard level; uneven and empty chunks are normal everywhere. In the
// contracts, `before`/`after` are the step's dist attrs and `L` a rank's local buffer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"

namespace spmd {

// Pre: group is the minor-most suffix of before.dims[dim] (in that order). After: before
// with the group removed from dims[dim]. Each rank's new L is the concatenation along dim,
// in group-position order, of the L of its group's members.
struct AllGather {
  AxisList group;  // major to minor
  int dim = -1;
  bool operator==(const AllGather&) const = default;
};

// Pre: every axis of the group is partial(op) in before. After: the group dropped from the
// partial map and appended (in order) as the minor-most axes of dims[dim]. Each rank
// reduces the L of its group's members elementwise with op (all have the same shape) and
// keeps the part of dim that `after` assigns to it.
struct ReduceScatter {
  AxisList group;
  int dim = -1;
  ReduceOp op = ReduceOp::kSum;
  bool operator==(const ReduceScatter&) const = default;
};

// Pre: every axis of the group is partial(op). After: the group dropped from the partial
// map. Each rank's new L is the elementwise op over its group's L (avg: the mean of the n
// buffers).
struct AllReduce {
  AxisList group;
  ReduceOp op = ReduceOp::kSum;
  bool operator==(const AllReduce&) const = default;
};

// Pre: group is the minor-most suffix of before.dims[from_dim], from_dim != to_dim. After:
// the group removed from dims[from_dim] and appended (in order) as minor-most axes of
// dims[to_dim]. Each rank's new L covers its `after` box: the part of it in the `before`
// box of group member m comes from m (itself included). Uneven sizes on both dims.
struct AllToAll {
  AxisList group;
  int from_dim = -1;
  int to_dim = -1;
  bool operator==(const AllToAll&) const = default;
};

// Pre: axis is replicated (in no dim, not partial). After: axis appended minor-most to
// dims[dim]. Each rank keeps the sub-range of dim that `after` assigns to it. 0 bytes.
struct LocalSlice {
  int axis = -1;
  int dim = -1;
  bool operator==(const LocalSlice&) const = default;
};

// Pre: axis replicated. After: axis partial(op). sum: the rank with coordinate 0 on axis
// keeps L, the others write 0; prod: the others write 1; avg, max, min, any, all: every
// rank keeps L. 0 bytes.
struct LocalPartial {
  int axis = -1;
  ReduceOp op = ReduceOp::kSum;
  bool operator==(const LocalPartial&) const = default;
};

// Pre: axis is the minor-most axis of before.dims[dim]. After: axis removed from dims[dim]
// and partial(sum). Each rank widens its local dim to the parent chunk (the range `after`
// assigns), writing 0 outside its own old chunk. 0 bytes.
struct ShardToPartial {
  int axis = -1;
  int dim = -1;
  bool operator==(const ShardToPartial&) const = default;
};

// Pre: axis partial(sum) and to_op avg, or partial(avg) and to_op sum; floating dtypes
// only. After: axis partial(to_op). sum -> avg multiplies L by n(axis); avg -> sum divides
// L by n(axis). 0 bytes.
struct Rescale {
  int axis = -1;
  ReduceOp from_op = ReduceOp::kSum;
  ReduceOp to_op = ReduceOp::kAvg;
  bool operator==(const Rescale&) const = default;
};

// before on `mesh` -> after on `to_mesh`. Pre: neither dist attr is partial; the meshes may
// differ (a sub-mesh, other process ids, another shape) or be the same (a point-to-point
// redistribution). Each rank of to_mesh ends holding its `after` box; the pieces it
// receives are exactly SendRecvTransfers(step, shape) (rules/reshard/reshard_bytes.h: who sends
// which box to whom), and it keeps what it already held under `before` (as a rank of
// `mesh`). Ranks only in `mesh` just send.
struct SendRecv {
  bool operator==(const SendRecv&) const = default;
};

// What a step does. The alternatives are in StepKind order.
using StepAction = std::variant<AllGather, ReduceScatter, AllReduce, AllToAll, LocalSlice,
                                LocalPartial, ShardToPartial, Rescale, SendRecv>;

enum class StepKind {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kAllToAll,
  kLocalSlice,
  kLocalPartial,
  kShardToPartial,
  kRescale,
  kSendRecv,
};
// `all_gather`, `reduce_scatter`, `all_reduce`, `all_to_all`, `local_slice`,
// `local_partial`, `shard_to_partial`, `rescale`, `send_recv`.
std::string_view ToString(StepKind kind);
// True for the steps that move bytes (collectives and SendRecv).
bool Communicates(StepKind kind);
// Returns the kind of `action` (its alternative).
StepKind KindOf(const StepAction& action);
// Returns the mesh axes `action` acts on, major to minor: the group of a collective, the
// one axis of a local step, none for SendRecv.
AxisList AxesOf(const StepAction& action);

struct ReshardStep {
  StepAction action;
  Mesh mesh;     // the mesh of `before`
  Mesh to_mesh;  // the mesh of `after` (== mesh except for a SendRecv between meshes)
  DistAttr before;
  DistAttr after;
  int64_t bytes_per_rank = 0;  // max over ranks of bytes received
  // The time model (rules/reshard/reshard_cost.h): latency terms of the busiest rank and the
  // modelled time in picoseconds.
  int64_t messages = 0;
  int64_t picoseconds = 0;

  StepKind kind() const { return KindOf(action); }
  AxisList axes() const { return AxesOf(action); }
  // Returns the action as `T` (nullptr when the step is of another kind).
  template <class T>
  const T* As() const {
    return std::get_if<T>(&action);
  }

  // Prints the group and the collective: `{1} reduce_scatter(sum) -> dim 1`,
  // `{0} all_to_all dim 0 -> dim 1`, `{0,1} all_reduce(sum)`, `p2p send_recv`.
  std::string Describe() const;
};

// The two columns of Describe: the group (`{0,1}`, `p2p`) and the collective with its
// dims and ops (`reduce_scatter(sum) -> dim 1`).
std::string GroupText(const ReshardStep& step);
std::string CollectiveText(const ReshardStep& step);

// True when the two meshes have the same shape and process ids (axis names aside).
bool SameMesh(const Mesh& a, const Mesh& b);
// True when mesh axis `axis` is in no dim of `attr` and not partial.
bool IsReplicatedAxis(const DistAttr& attr, int axis);

// Returns `step.after` as the contract derives it from step.before and the step's action
// (for SendRecv: step.after itself, after checking that neither side is partial). Throws
// SpmdError(kInvalidArgument, "step") when a precondition of the contract fails.
DistAttr ApplyStep(const ReshardStep& step);

}  // namespace spmd
