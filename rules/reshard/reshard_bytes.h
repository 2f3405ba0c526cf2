// The byte model of reshard steps and the lower bound on a whole reshard (SEMANTICS.md §8,
// docs/RESHARD.md "Bytes" and "Lower bound").
//
// Bytes (the executor moves the same, per rank; `s` = bytes per element, `T` = the rank's
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
#pragma once

#include <cstdint>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/model/layout.h"
#include "rules/model/mesh.h"
#include "rules/reshard/reshard_step.h"

namespace spmd {

// Returns the bytes of one element of `dtype` (float64 8, float32 4, int64 8, bool 1).
int64_t BytesPerElement(DType dtype);

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

// A step by reference: what the search prices before it builds a ReshardStep.
struct StepView {
  const StepAction& action;
  const Mesh& mesh;
  const Mesh& to_mesh;
  const DistAttr& before;
  const DistAttr& after;
};
// Returns MaxStepBytes of the step `view` describes, without visiting every rank: a rank's
// bytes depend on its coordinates on the axes of the dims the step changes, times the
// sizes of the other dims, which are largest at coordinate 0 (chunk 0 is the largest at
// every level of the ceil layout). The tests compare it with MaxStepBytes.
int64_t FastMaxStepBytes(const StepView& view, const std::vector<int64_t>& shape, DType dtype);

// One point-to-point piece of a SendRecv: `box` (global) goes from `from_process` to
// `to_process`.
struct Transfer {
  int64_t from_process = 0;
  int64_t to_process = 0;
  Box box;
  bool operator==(const Transfer&) const = default;
};
// Returns the pieces of a SendRecv step, in order: for each rank r of to_mesh (row-major,
// index k), for each distinct `before` box B (first-appearance order over the coordinates
// of `mesh`) that r does not hold itself, the non-empty intersection of B with r's `after`
// box, sent by the holder number (k mod h) of B's h holders (row-major order). Throws
// SpmdError(kInvalidArgument, "step") for another kind of step.
std::vector<Transfer> SendRecvTransfers(const ReshardStep& step,
                                        const std::vector<int64_t>& shape);

// Returns a lower bound on the max over ranks of the bytes any algorithm receives
// (docs/RESHARD.md "Lower bound"): per rank, the bytes of its target shard it does not hold;
// with a partial source, the reduction bound ceil(((N_P - 2) * E + sum of target shard
// sizes + the elements no rank both holds and needs) / ranks) * s over the N_P addends
// (whole elements); with a partial target, per
// target partial group, the elements no member holds divided by the group size (rounded
// up, times s); partial to partial: 0 (no bound derived).
// Equals SEMANTICS.md §8 on one axis. Saturates at 2^62 bytes (still a lower bound): a
// checked shape's 2^62 elements of 8 bytes would not fit in int64.
int64_t ReshardLowerBound(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                          const DistAttr& to, const std::vector<int64_t>& shape, DType dtype);

// Returns a + b for counts in [0, 2^62] (bytes, picoseconds), saturating at 2^62: sums of
// lower bounds, of step costs.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  constexpr int64_t kCap = int64_t{1} << 62;
  return b > kCap - a ? kCap : a + b;
}

}  // namespace spmd
