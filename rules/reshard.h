// The reshard planner (SEMANTICS.md §8): turns a tensor's dist attr into another with the
// fewest bytes per rank. A plan is data (a list of steps); runtime/ executes it. The step
// contracts below are what the executor implements, exactly; docs/RESHARD.md explains the
// search, the byte conventions and the lower bound with examples.
//
// Vocabulary. A step acts on a *group*: one mesh axis, or several axes treated as one
// flattened axis (row-major over the listed axes, major first). The group of the rank at
// coordinate `c` is the set of ranks whose coordinates differ from `c` only on the group's
// axes; its size `n` is the product of those axes' sizes; a member's *group position* is
// its row-major index over the group's axes. Chunks follow the ceil layout (SEMANTICS.md
// §2.2) at every co-shard level; uneven and empty chunks are normal everywhere.
//
// Step contracts (per rank; `before`/`after` are dist attrs, `L` a rank's local buffer):
// - AllGather(group g, dim d). Pre: g is the minor-most suffix of before.dims[d] (in that
//   order). After: before with g removed from dims[d]. Each rank's new L is the
//   concatenation along d, in group-position order, of the L of its group's members.
// - ReduceScatter(group g, dim d, op). Pre: every axis of g is partial(op) in before. After:
//   g dropped from the partial map and appended (in order) as the minor-most axes of
//   dims[d]. Each rank reduces the L of its group's members elementwise with op (all have
//   the same shape) and keeps the part of dim d that `after` assigns to it.
// - AllReduce(group g, op). Pre: every axis of g is partial(op). After: g dropped from the
//   partial map. Each rank's new L is the elementwise op over its group's L (avg: the mean
//   of the n buffers).
// - AllToAll(group g, dim i -> dim j). Pre: g is the minor-most suffix of before.dims[i],
//   i != j. After: g removed from dims[i] and appended (in order) as minor-most axes of
//   dims[j]. Each rank's new L covers its `after` box: the part of it in the `before` box
//   of group member m comes from m (itself included). Uneven sizes on both dims (D6).
// - LocalSlice(axis a, dim d). Pre: a is replicated (in no dim, not partial). After: a
//   appended minor-most to dims[d]. Each rank keeps the sub-range of dim d that `after`
//   assigns to it. 0 bytes.
// - LocalPartial(axis a, op). Pre: a replicated. After: a partial(op). sum: the rank with
//   coordinate 0 on a keeps L, the others write 0; prod: the others write 1; avg, max,
//   min, any, all: every rank keeps L. 0 bytes.
// - ShardToPartial(axis a, dim d). Pre: a is the minor-most axis of before.dims[d]. After:
//   a removed from dims[d] and partial(sum). Each rank widens its local dim d to the
//   parent chunk (the range `after` assigns), writing 0 outside its own old chunk. 0 bytes.
// - Rescale(axis a, op -> to_op). Pre: a partial(sum) and to_op avg, or a partial(avg)
//   and to_op sum; floating dtypes only. After: a partial(to_op). sum -> avg multiplies L
//   by n(a); avg -> sum divides L by n(a). 0 bytes.
// - SendRecv(before on `mesh` -> after on `to_mesh`). Pre: neither dist attr is partial;
//   the meshes may differ (a sub-mesh, other process ids, another shape) or be the same
//   (a point-to-point redistribution). Each rank of to_mesh ends holding its `after` box;
//   the pieces it receives are exactly SendRecvTransfers(step, shape) (who sends which
//   box to whom), and it keeps what it already held under `before` (as a rank of `mesh`).
//   Ranks only in `mesh` just send.
//
// Bytes (the executor counts the same, per rank; `s` = bytes per element, `T` = the rank's
// local buffer bytes before the step):
// - AllGather: received = the others' chunks in its group; sent = (n-1) * its own chunk.
// - ReduceScatter (direct): received = (n-1) * its own new chunk (one addend from each
//   other member); sent = T - its own new chunk (every other member's chunk).
// - AllReduce (reduce-scatter then all-gather over a balanced split of the T / s elements:
//   the member at position p of the group owns c_p = floor(T/s / n), plus one when p <
//   (T/s) mod n): sent = received = T - c_p * s + (n-1) * c_p * s. Where n divides the
//   element count both equal the ring figures of SEMANTICS.md §8 ((n-1)/n T and
//   2(n-1)/n T); otherwise they are what these algorithms really move, in whole elements
//   (docs/RESHARD.md "Uneven reductions").
// - AllToAll: received = the part of its `after` box it did not hold; sent = the part of
//   its `before` box it does not keep.
// - Local steps: 0.
// - SendRecv: received = the part of its `after` box it did not hold under `before`; sent
//   = the volume of the transfers it is the source of.
// A step's bytes_per_rank is the max over ranks of bytes received; a plan's bytes_per_rank
// is the sum of its steps' (steps run one after the other).
//
// Worked example: mesh 2x2, shape [1024, 512] float32 (T = 2 MiB), [P(sum), P(sum)] ->
// [R, R]: one AllReduce over the flattened group {0, 1} (n = 4): 2 * 3/4 * T = 3 MiB per
// rank, the lower bound 2(N-1)/N * T; two per-axis all-reduces would cost 2 * T = 4 MiB.
//
// Constraints (ReshardPlan):
// - steps chain: steps[0].before == from (on from_mesh), steps[k+1].before ==
//   steps[k].after, the last after == to (on to_mesh); no steps when from == to on one mesh;
// - every step's after == ApplyStep(step) and every intermediate dist attr is valid, with
//   a partial map whose ops are all equal or all in {sum, avg} (mixed ops have no order);
// - bytes_per_rank == sum of steps' bytes_per_rank >= lower_bound_bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rules/dist_attr.h"
#include "rules/dtype.h"
#include "rules/layout.h"
#include "rules/mesh.h"

namespace spmd {

// Returns the bytes of one element of `dtype` (float64 8, float32 4, int64 8, bool 1).
int64_t BytesPerElement(DType dtype);

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

struct ReshardStep {
  StepKind kind = StepKind::kAllGather;
  AxisList axes;      // the group, major to minor; one axis for local steps; empty: SendRecv
  int dim = -1;       // AllGather, ReduceScatter, LocalSlice, ShardToPartial; AllToAll: i
  int to_dim = -1;    // AllToAll: j
  ReduceOp op = ReduceOp::kSum;     // ReduceScatter, AllReduce, LocalPartial; Rescale: from
  ReduceOp to_op = ReduceOp::kSum;  // Rescale: to
  Mesh mesh;          // the mesh of `before`
  Mesh to_mesh;       // the mesh of `after` (== mesh except for a SendRecv between meshes)
  DistAttr before;
  DistAttr after;
  int64_t bytes_per_rank = 0;  // max over ranks of bytes received

  // Prints the group and the collective: `{1} reduce_scatter(sum) -> dim 1`,
  // `{0} all_to_all dim 0 -> dim 1`, `{0,1} all_reduce(sum)`, `p2p send_recv`.
  std::string Describe() const;
};

struct ReshardPlan {
  std::vector<int64_t> shape;  // the global shape (the same on both meshes)
  DType dtype = DType::kFloat32;
  Mesh from_mesh;
  Mesh to_mesh;                // == from_mesh unless the tensor moves
  DistAttr from;
  DistAttr to;
  std::vector<ReshardStep> steps;
  int64_t bytes_per_rank = 0;     // sum over steps of the step's max bytes received
  int64_t lower_bound_bytes = 0;  // ReshardLowerBound: no plan can do with less

  // bytes_per_rank / lower_bound_bytes; 1 when both are 0; +infinity when only the bound
  // is 0.
  double Ratio() const;
  int NumSendRecv() const;
};

// Returns the plan with the fewest bytes per rank from `from` to `to` on one mesh
// (exact: Dijkstra over dist attrs, one step per edge; ties go to fewer steps, then fewer
// SendRecv steps, then a fixed edge order, so the answer is deterministic).
// Throws SpmdError(kInvalidArgument, "shape" / "from" / "to") on bad input and
// SpmdError(kUnsupported, "from.partial" / "to.partial") when a partial map mixes reduce
// ops other than sum with avg.
ReshardPlan PlanReshard(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                        const DistAttr& from, const DistAttr& to);
// The same between two meshes (same global shape; to_mesh may be a sub-mesh, other ids,
// another shape). Partial values are reduced on from_mesh before they move.
ReshardPlan PlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                        const DistAttr& to, const std::vector<int64_t>& shape, DType dtype);

// The naive per-axis plan (the yardstick PlanReshard never exceeds): all-reduce every
// partial axis whose placement changes, one axis at a time; all-gather, minor-most first,
// every axis a dim does not keep as a prefix of its target list; then (moving meshes) one
// SendRecv; then local slices and local partials.
ReshardPlan NaiveReshardPlan(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                             const DistAttr& to, const std::vector<int64_t>& shape,
                             DType dtype);

// Returns a lower bound on the max over ranks of the bytes any algorithm receives
// (docs/RESHARD.md "Lower bound"): per rank, the bytes of its target shard it does not hold;
// with a partial source, the reduction bound ceil(((N_P - 2) * E + sum of target shard
// sizes) / ranks) * s over the N_P addends (whole elements); with a partial target, per
// target partial group, the elements no member holds divided by the group size (rounded
// up, times s); partial to partial: 0 (no bound derived).
// Equals SEMANTICS.md §8 on one axis.
int64_t ReshardLowerBound(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                          const DistAttr& to, const std::vector<int64_t>& shape, DType dtype);

// Returns `step.after` as the contract derives it from step.before and the step's fields
// (for SendRecv: step.after itself, after checking that neither side is partial). Throws
// SpmdError(kInvalidArgument, "step") when a precondition of the contract fails.
DistAttr ApplyStep(const ReshardStep& step);

struct RankBytes {
  int64_t sent = 0;
  int64_t received = 0;
  bool operator==(const RankBytes&) const = default;
};
// Returns the exact bytes the rank with `process_id` sends and receives in `step` (0 and
// 0 for a rank outside the step's meshes).
RankBytes StepBytesOf(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype,
                      int64_t process_id);
// The same by coordinate on step.mesh (for SendRecv: the rank of step.mesh at `coord`).
RankBytes StepBytesAt(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype,
                      const std::vector<int64_t>& coord);
// Returns the max over every rank of both meshes of StepBytesOf(...).received.
int64_t MaxStepBytes(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype);

// One point-to-point piece of a SendRecv: `box` (global, one range per dim) goes from
// `from_process` to `to_process`.
struct Transfer {
  int64_t from_process = 0;
  int64_t to_process = 0;
  std::vector<Range> box;
  bool operator==(const Transfer&) const = default;
};
// Returns the pieces of a SendRecv step, in order: for each rank r of to_mesh (row-major,
// index k), for each distinct `before` box B (first-appearance order over the coordinates
// of `mesh`) that r does not hold itself, the non-empty intersection of B with r's `after`
// box, sent by the holder number (k mod h) of B's h holders (row-major order). Throws
// SpmdError(kInvalidArgument, "step") for another kind of step.
std::vector<Transfer> SendRecvTransfers(const ReshardStep& step,
                                        const std::vector<int64_t>& shape);

// The one printer for plans (CLI, logs, goldens):
//   reshard [1024, 512] float32 on mesh[2,4] ids=[0,1,2,3,4,5,6,7]
//   from [S(0), P(sum)] to [R, S(1)]
//     #  group  collective                        after               bytes/rank
//     1  {1}    reduce_scatter(sum) -> dim 1      [S(0), S(1)]             ...
//   total ... bytes per rank; lower bound ...; ratio 1.00
std::string ToString(const ReshardPlan& plan);
// {"shape", "dtype", "from_mesh", "to_mesh", "from", "to", "steps": [{"kind", "group",
// "dim", "to_dim", "op", "to_op", "before", "after", "bytes_per_rank"}], "bytes_per_rank",
// "lower_bound_bytes", "ratio"} (ratio null when the bound is 0 and the plan is not).
nlohmann::json ToJson(const ReshardPlan& plan);

}  // namespace spmd
