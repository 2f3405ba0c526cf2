// The time model of reshard steps (docs/RESHARD.md "Time"): alpha-beta, one pair per step
// kind. A communicating step costs
//
//   time = alpha * messages + beta * bytes
//
// where `bytes` is the step's bytes_per_rank (the max over ranks of bytes received, the
// byte model of rules/reshard/reshard_bytes.h) and `messages` the latency terms of its busiest
// rank (StepMessages below); a local step costs local.alpha + local.beta * the bytes it
// writes on its busiest rank (the largest `after` shard); a SendRecv also pays local.beta
// on its largest `after` shard (the executor writes the whole new box, copying what a rank
// keeps), so that a SendRecv that moves nothing never undercuts a local slice. The
// collectives' own packing is in their beta (measured through the executor). Alpha is in microseconds per message, beta in
// nanoseconds per byte (1 / bandwidth in GB/s). The defaults are measured by
// bench/alphabeta_bench.cc on the transport named in `source`; a model from another machine
// or transport is loaded from a JSON file (io/cost_model_json.h, `spmd plan --cost-model`).
//
// Worked example (all_gather on mesh [4], [S(0)] -> [R] of 4 MiB float32): messages = 3,
// bytes = 3 MiB, time = 3 alpha + 3 MiB * beta (defaults: 3 * 16.6 + 3145728 * 0.305e-3 =
// 1009 us).
//
// Constraints (CostModel): every alpha and beta finite and in [0, 1e9]
// (ValidateCostModel names the field that is not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/reshard/reshard_bytes.h"
#include "rules/reshard/reshard_step.h"

namespace spmd {

// One step kind's cost: alpha per message (microseconds) and beta per byte (nanoseconds).
struct StepCost {
  double alpha_us = 0;
  double beta_ns_per_byte = 0;
  bool operator==(const StepCost&) const = default;
};

struct CostModel {
  StepCost all_gather;
  StepCost reduce_scatter;
  StepCost all_reduce;
  StepCost all_to_all;
  StepCost send_recv;
  StepCost local;  // local_slice, local_partial, shard_to_partial, rescale: one per step
  std::string source;  // where the numbers come from (date, machine, transport)
  bool operator==(const CostModel&) const = default;

  // The parameters of `kind` (the four local kinds share `local`).
  const StepCost& Of(StepKind kind) const;
  // The measured defaults (docs/RESHARD.md "Time": date, machine, load, transport).
  static CostModel Default();
};

// The field names of the model, in file order: `all_gather`, ..., `local`.
const std::vector<std::string>& CostModelKinds();
// The parameters named `kind` (one of CostModelKinds()); nullptr for another name.
StepCost* CostOf(CostModel& model, const std::string& kind);

// Throws SpmdError(kInvalidArgument, "<prefix>.<kind>.alpha_us" or
// "<prefix>.<kind>.beta_ns_per_byte") for a value that is not finite or not in [0, 1e9].
void ValidateCostModel(const CostModel& model, const std::string& prefix = "cost_model");

// What the planner minimises: modelled time (ties: fewer bytes, then fewer steps, then
// fewer SendRecv steps) or bytes per rank (ties: fewer steps, then fewer SendRecv steps;
// SEMANTICS.md §8's byte-optimal planner).
enum class ReshardObjective { kTime, kBytes };
std::string_view ToString(ReshardObjective objective);  // "time", "bytes"

// Returns the latency terms of the step `view` describes on its busiest rank, with n the
// group size, counted for the algorithms whose bytes rules/reshard/reshard_bytes.h counts:
// all_gather, reduce_scatter (direct: one message from every other member), all_to_all
// (the executor sends each member its part): n - 1; all_reduce (reduce-scatter then
// all-gather): 2 (n - 1); send_recv: the most pieces a rank receives, or the pieces per source rank if
// more (SendRecvTransfers), at least 1 (the executor synchronizes after it); local steps: 1;
// a collective over a group of one rank: 0.
int64_t StepMessages(const StepView& view, const std::vector<int64_t>& shape);

// Returns the bytes a local step or a SendRecv writes on its busiest rank (its largest
// `after` shard, in bytes); 0 for a collective.
int64_t LocalStepBytes(const StepView& view, const std::vector<int64_t>& shape, DType dtype);

// Returns the modelled time of one step in picoseconds (integers, so that plans tie
// exactly): alpha * messages + beta * bytes + local.beta * local_bytes, with alpha and beta
// of `kind`, bytes = bytes_per_rank (0 for a local step) and local_bytes = LocalStepBytes
// (0 for a collective), rounded to whole microseconds (the model's resolution: plans that
// differ by less tie, and the tie-breaks prefer fewer bytes, fewer steps and collectives
// over SendRecv). Saturates at 2^62.
int64_t StepPicoseconds(const CostModel& model, StepKind kind, int64_t messages, int64_t bytes,
                        int64_t local_bytes);

}  // namespace spmd
