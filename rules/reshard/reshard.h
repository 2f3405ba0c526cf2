// The reshard planner (SEMANTICS.md §8): turns a tensor's dist attr into another with the
// fewest bytes per rank (the default, ReshardObjective::kBytes), or in the least modelled
// time (ReshardObjective::kTime; alpha-beta: rules/reshard/reshard_cost.h). A plan is data (a list of steps); runtime/ executes it. The
// step kinds and their contracts are in rules/reshard/reshard_step.h, the byte model and the lower
// bound in rules/reshard/reshard_bytes.h, the time model in rules/reshard/reshard_cost.h, the printer in
// rules/reshard/reshard_print.h; docs/RESHARD.md explains the search, the byte conventions, the
// time model and the lower bound with examples.
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
// - bytes_per_rank == sum of steps' bytes_per_rank >= lower_bound_bytes;
// - picoseconds == sum of steps' picoseconds (each StepPicoseconds under `model`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/model/layout.h"
#include "rules/model/mesh.h"
#include "rules/reshard/reshard_bytes.h"
#include "rules/reshard/reshard_cost.h"
#include "rules/reshard/reshard_step.h"

namespace spmd {

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
  int64_t picoseconds = 0;        // modelled time: the sum over steps
  ReshardObjective objective = ReshardObjective::kBytes;  // what the search minimised
  CostModel model;                // the time model the steps are priced with

  double Seconds() const { return static_cast<double>(picoseconds) * 1e-12; }

  // bytes_per_rank / lower_bound_bytes; 1 when both are 0; +infinity when only the bound
  // is 0.
  double Ratio() const;
  int NumSendRecv() const;
};

// How to plan: what to minimise, the time model, and step kinds the search may not use
// (benchmarks force an alternative that way: a plan without SendRecv, or without the
// collectives a SendRecv replaces). Excluding kinds never makes a plan unsound; it can
// leave none (SpmdError kUnsupported, field "to").
struct ReshardOptions {
  ReshardObjective objective = ReshardObjective::kBytes;
  CostModel model = CostModel::Default();
  std::vector<StepKind> excluded;
};

// Returns the plan with the fewest bytes per rank from `from` to `to` on one mesh (exact:
// Dijkstra over dist attrs, one step per edge; ties go to fewer steps, then fewer SendRecv
// steps, then a fixed edge order, so the answer is deterministic); with
// ReshardObjective::kTime the plan with the least modelled time (ties: fewer bytes, ...).
// Every plan reports both its bytes and its modelled time.
// Throws SpmdError(kInvalidArgument, "shape" / "from" / "to") on bad input and
// SpmdError(kUnsupported, "from.partial" / "to.partial") when a partial map mixes reduce
// ops other than sum with avg.
ReshardPlan PlanReshard(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                        const DistAttr& from, const DistAttr& to);
// The same between two meshes (same global shape; to_mesh may be a sub-mesh, other ids,
// another shape). Partial values are reduced on from_mesh before they move.
ReshardPlan PlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                        const DistAttr& to, const std::vector<int64_t>& shape, DType dtype);
// Both with options (the model is validated: SpmdError naming "cost_model.<kind>.<field>").
ReshardPlan PlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                        const DistAttr& to, const std::vector<int64_t>& shape, DType dtype,
                        const ReshardOptions& options);

// The naive per-axis plan (the yardstick PlanReshard never exceeds): all-reduce every
// partial axis whose placement changes, one axis at a time; all-gather, minor-most first,
// every axis a dim does not keep as a prefix of its target list; then (moving meshes) one
// SendRecv; then local slices and local partials. Priced with `model`.
ReshardPlan NaiveReshardPlan(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                             const DistAttr& to, const std::vector<int64_t>& shape,
                             DType dtype, const CostModel& model = CostModel::Default());

}  // namespace spmd
