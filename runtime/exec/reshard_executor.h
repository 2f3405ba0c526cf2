// The reshard executor: runs the steps of a ReshardPlan (rules/reshard/reshard.h) on one rank with
// a Communicator, each step exactly as its contract in rules/reshard/reshard_step.h says.
//
// Every rank of the plan's meshes calls ExecutePlan with the same plan (plans are
// deterministic, so ranks that planned on their own agree); ranks in neither mesh may call
// it too and do nothing. Per step:
// - AllGather(g, d): one all_gather over the group (counts = the members' chunk sizes,
//   uneven allowed); when the dims before d are all of size 1 the chunks land in place,
//   otherwise they go to a staging buffer and are unpacked along d.
// - ReduceScatter(g, d, op): the buffer is packed along d into the members' `after` chunks
//   (in place when the dims before d are of size 1) and reduce_scatter'ed with those counts.
// - AllReduce(g, op): one in-place all_reduce.
// - AllToAll(g, i -> j): the part of this rank's old box in each member's new box goes to
//   that member point to point; the own part is copied locally, not sent. The bytes are
//   those of an all_to_all with per-member counts.
// - SendRecv: exactly SendRecvTransfers(step, shape): this rank sends the boxes it is the
//   source of, receives those addressed to it, and copies what it already held.
//   Both point-to-point kinds send every piece as one contiguous message: a piece that is
//   one contiguous run of its buffer is sent from (received into) its place, a strided one
//   is packed into a staging buffer (unpacked after Synchronize) with the Backend's
//   CopyBox. (Strided pieces went as SendBox / RecvBox before; Open MPI's copy-in/copy-out
//   of subarray types took up to 2x the packed send: docs/BENCHMARKS.md.)
// - LocalSlice, LocalPartial, ShardToPartial, Rescale: local, no communication.
//
// Local work (box copies, fills, scaling) runs on the Backend of the communicator's device
// (kernels/backend.h), on the communicator's stream; new buffers come from the allocator of
// the rank's buffer. Steps stay stream-ordered: the executor synchronizes the communicator
// after steps that move data point to point (those calls complete only at Synchronize),
// and not after collectives or local steps (the stream orders them; backend.h). The
// result is ordered on the communicator's stream: the host reads it after the Backend has
// synchronized that stream (a no-op on the host, where every call completes in place).
// A rank's buffer must be on the communicator's device and stream (InvalidArgument
// "local.device" otherwise).
//
// Bytes: the communicator counts, per rank and step, exactly the plan's StepBytesOf(...),
// uneven reductions included: both count the whole elements of the same algorithms
// (rules/reshard/reshard_bytes.h, communicator.h); and the backend's transport (what it hands MPI,
// or copies between threads, counted where it does) moves exactly those bytes too. The
// tests check transport == counted == planned on every rank and step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/layout.h"
#include "rules/reshard/reshard.h"
#include "runtime/comm/communicator.h"

namespace spmd::runtime {

using Shape = std::vector<int64_t>;

// ---- Boxes and strided copies ---------------------------------------------------------------

// Boxes (Box, BoxAt, Intersect, Volume, RelativeTo) are rules/model/layout.h's; strided box
// copies are the Backend's (kernels/backend.h, CopyBox).
// The part `box` (local coordinates of `t`) of `t` as a new tensor.
kernels::Tensor SliceBox(const kernels::Tensor& t, const Box& box);

// ---- The executor ---------------------------------------------------------------------------

// What one step moved on this rank.
struct StepRecord {
  StepKind kind = StepKind::kAllGather;
  RankBytes planned;    // StepBytesOf(step, shape, dtype, this rank)
  RankBytes counted;    // the communicator's counters over the step
  RankBytes transport;  // what the backend really handed its transport over the step
                        // (Communicator::transport_bytes())
};

struct ReshardReport {
  std::vector<StepRecord> steps;  // one per plan step, in order
  RankBytes planned;              // sums over the steps
  RankBytes counted;
  RankBytes transport;
};

// Runs one step on this rank (comm.rank() is its process id). `local` is this rank's buffer
// under step.before (nothing when the rank is not in step.mesh); returns its buffer under
// step.after (nothing when it is not in step.to_mesh). Throws SpmdError(kInvalidArgument,
// "local") when the buffer's shape or dtype is not what step.before gives this rank.
std::optional<kernels::Tensor> ExecuteStep(const ReshardStep& step, const Shape& shape,
                                           DType dtype, std::optional<kernels::Tensor> local,
                                           Communicator& comm);

// Runs every step of `plan` in order. `local` is this rank's buffer under plan.from on
// plan.from_mesh (nothing for a rank outside it); returns its buffer under plan.to on
// plan.to_mesh (nothing for a rank outside it). Fills `report` when given.
std::optional<kernels::Tensor> ExecutePlan(const ReshardPlan& plan,
                                           std::optional<kernels::Tensor> local,
                                           Communicator& comm, ReshardReport* report = nullptr);

// What the executor works out from a plan on one rank (coordinates, groups, chunk sizes,
// boxes, the send_recv pieces it sends and receives): a function of the plan and the rank
// only, defined in reshard_executor.cc.
struct RankPrep;

// A plan with each rank's RankPrep, made on that rank's first call and shared by later
// ones (thread-safe: the ranks of a ThreadCommunicator share one process).
class PreparedPlan {
 public:
  explicit PreparedPlan(ReshardPlan plan);
  ~PreparedPlan();
  PreparedPlan(const PreparedPlan&) = delete;
  PreparedPlan& operator=(const PreparedPlan&) = delete;

  const ReshardPlan plan;
  std::shared_ptr<const RankPrep> For(int64_t rank) const;

 private:
  mutable std::mutex mu_;
  mutable std::unordered_map<int64_t, std::shared_ptr<const RankPrep>> by_rank_;
};

// ExecutePlan of prepared.plan, with this rank's preparation from `prepared` (made once):
// the same messages and results, without redoing the per-rank work on every call.
std::optional<kernels::Tensor> ExecutePlan(const PreparedPlan& prepared,
                                           std::optional<kernels::Tensor> local,
                                           Communicator& comm, ReshardReport* report = nullptr);

// PlanReshard behind a cache shared by every thread of the process (plans are pure
// functions of their request; the cache holds at most a few thousand plans).
// CachedPreparedPlan hands out the cached plan itself with its per-rank preparations
// (immutable but for those, kept alive by the pointer even when the cache is cleared), so
// a warm call copies and recomputes nothing; CachedPlan the same plan alone;
// CachedPlanReshard a copy.
std::shared_ptr<const PreparedPlan> CachedPreparedPlan(const Mesh& from_mesh, const DistAttr& from,
                                                      const Mesh& to_mesh, const DistAttr& to,
                                                      const Shape& shape, DType dtype);
std::shared_ptr<const ReshardPlan> CachedPlan(const Mesh& from_mesh, const DistAttr& from,
                                              const Mesh& to_mesh, const DistAttr& to,
                                              const Shape& shape, DType dtype);
ReshardPlan CachedPlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                              const DistAttr& to, const Shape& shape, DType dtype);

}  // namespace spmd::runtime
