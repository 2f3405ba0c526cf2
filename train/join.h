// Uneven inputs in data-parallel training: ranks with different numbers of batches. A
// rank that runs out of batches joins: it keeps taking part in every round of the ranks
// still training (it shadows their collectives, contributing zeros), so nothing hangs,
// and the job ends once every rank has joined.
//
// Each round (one optimizer step of the job), every rank of the data-parallel group calls
// `Next(has_batch, weight)`: one all-reduce (sum) of {has a batch, its weight} over the
// group. It returns how many ranks contribute this round and their total weight; 0 ranks
// means every rank has joined (stop). Then `AverageGradients` all-reduces (sum) each
// rank's gradient scaled by its weight (a joined rank: zeros) and divides by the total
// weight, and writes the result back as every parameter's gradient, on every rank,
// joined ones included; every rank then runs the same optimizer step, so the replicas
// stay identical without a final broadcast.
//
// Why this is exactly one process training on the union of the batches: with loss_r the
// mean over rank r's rows (weight w_r = its number of rows), its gradient is
// g_r = (1 / w_r) sum over its rows of the per-row gradient; the mean over the union of
// the active ranks' rows has the gradient (sum over active r of w_r g_r) / (sum of w_r),
// which is what the round computes: dividing by the number of ranks (or by the world)
// would be wrong as soon as one rank has joined. So step k of one process, on the
// concatenation of the batches of the ranks active at step k, has the same gradient (up
// to the order of the float64 sums) and, the optimizer being the same, the same update.
//
// The gradients travel as float64 (float32 parameters are widened and rounded back). The
// rank's model is laid out however it likes (a replica on a mesh of one rank, or a shard
// of a tensor-parallel model whose peers in the group hold the same shard): the average
// is taken elementwise over each parameter's local shard in its value's layout.
//
// On a device (the host, the simulated device, CUDA alike) every step runs where the
// gradients live: widening, scaling and rounding back are Dispatch ops on the parameters'
// communicator, the packing into one float64 buffer and the unpacking are Backend copies,
// the sum is one all-reduce of that device buffer, and the round's flags go through
// train/device.h's HostAllReduce. No typed host access of device memory.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/comm/communicator.h"
#include "train/autograd.h"

namespace spmd::train {

class Join {
 public:
  // `comm` moves the rounds' flags and gradients over `group` (the data-parallel ranks,
  // this rank among them; InvalidArgument "group" otherwise), on any device.
  Join(runtime::Communicator& comm, runtime::Group group);

  struct Round {
    int64_t index = 0;   // 1-based
    int64_t active = 0;  // ranks with a batch this round (0: all have joined)
    double weight = 0;   // their total weight
    bool mine = false;   // this rank has a batch
    double my_weight = 0;
  };
  // Collective over the group. InvalidArgument ("has_batch") for a batch after this rank
  // joined, ("weight") for a weight that is not positive and finite.
  Round Next(bool has_batch, double weight);

  // Replaces the gradient of every parameter (leaves requiring grad, the same list in the
  // same order on every rank) by the weighted average over the round's contributing
  // ranks. `local` is the communicator of the parameters' own mesh (reshards the local
  // gradient to the value's layout), on the join's device (InvalidArgument "local" else).
  // Collective over the group.
  void AverageGradients(const std::vector<Variable>& params, const Round& round,
                        runtime::Communicator& local);

  bool joined() const { return joined_; }
  int64_t rounds() const { return rounds_; }

 private:
  runtime::Communicator& comm_;
  runtime::Group group_;
  bool joined_ = false;
  int64_t rounds_ = 0;
};

}  // namespace spmd::train
