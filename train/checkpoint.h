// Sharded checkpoints of a Trainer: parameters and AdamW states, restorable onto any
// layout of the same model.
//
// SaveCheckpoint writes, under `dir`, each distinct shard once: the rank whose coordinate
// is 0 on every mesh axis that does not shard a tensor writes its shard of it as raw
// little-endian float64 (`<tensor>@<offsets>.bin`), and lists what it wrote in its own
// readable index `rank<R>.txt` (`shard <tensor> <global shape> <offset> <local shape>
// <file>`; rank 0 adds `step <parameter> <count>` lines). Tensors are named by the model's
// parameter names, with `.adam_m` and `.adam_v` for the moments.
// LoadCheckpoint reads every index, assembles each tensor it needs from the shards that
// cover it and lays it out as the loading trainer's layout says: a checkpoint saved on
// dp=2,tp=2 under ZeRO-1 loads into tp=4 under ZeRO-3, or onto one rank.
// Both are collective over the trainer's mesh (a barrier ends SaveCheckpoint). Errors:
// SpmdError(kInvalidArgument, "checkpoint") naming the file, for a missing or unreadable
// file, a tensor the shards do not cover exactly, or a shape that differs from the model's.
#pragma once

#include <string>

#include "runtime/communicator.h"
#include "train/trainer.h"

namespace spmd::train {

void SaveCheckpoint(Trainer& trainer, const std::string& dir, runtime::Communicator& comm);
void LoadCheckpoint(Trainer& trainer, const std::string& dir, runtime::Communicator& comm);

}  // namespace spmd::train
