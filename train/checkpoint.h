// Crash-safe sharded checkpoints of a Trainer: parameters, AdamW states and the step,
// restorable onto any layout of the same model (docs/TRAINING.md, "Checkpoints").
//
// Under a checkpoint root `dir` each checkpoint is a directory `step-<8 digits>` holding
// one file per distinct shard (`<tensor>@<offsets>.bin`, raw little-endian float64; the
// rank whose coordinate is 0 on every mesh axis that does not shard the tensor writes it)
// and a readable `MANIFEST`: format version, step, layout, the model's parameter set
// (name, dtype, global shape, AdamW step count) and every shard (tensor, offset, local
// shape, byte size, XXH3-64 checksum, file), ending in the XXH3-64 of everything above it.
//
// SaveCheckpoint writes into `dir/.tmp-step-<N>-<nonce>`, checks every write, fsync and
// close, fsyncs each file and the directory, agrees over the mesh that every rank's
// shards are durable, then the first rank of the mesh writes the MANIFEST last and renames
// the directory into place (atomically replacing a checkpoint of the same step) and
// fsyncs `dir`; with keep > 0 it then deletes all but the newest `keep` checkpoints. A
// failure on any rank is SpmdError(kInvalidArgument, "checkpoint") on every rank of the
// mesh (the failing rank's own message there, the failing rank named elsewhere), and the
// checkpoints already in `dir` are left as they were.
//
// LoadCheckpoint reads the newest `step-*` checkpoint under `dir` (or `dir` itself when it
// holds a MANIFEST), validates everything before changing the trainer (the manifest's
// checksum and version; the parameter set, naming the first difference; every count,
// offset and size with overflow-safe arithmetic; every file's size and checksum; that the
// shards tile each tensor exactly; every value finite), agrees on the outcome over the
// mesh, then lays each tensor out as the loading trainer's layout says (a checkpoint saved
// on dp=2,tp=2 under ZeRO-1 loads into tp=4 under ZeRO-3, or onto one rank) and returns
// the step. Errors: SpmdError(kInvalidArgument, "checkpoint") naming the file or the
// tensor, on every rank of the mesh, with the trainer unchanged.
//
// Both are collective over the trainer's mesh; ranks outside it do not call them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/comm/communicator.h"
#include "train/trainer.h"

namespace spmd::train {

inline constexpr int kCheckpointFormatVersion = 1;

struct SaveOptions {
  int64_t step = 0;  // the steps trained so far; names the checkpoint (step-<step>)
  int keep = 0;      // keep the newest `keep` checkpoints in dir; 0 keeps all
};

// Returns the path of the new checkpoint (`dir/step-<N>`).
std::string SaveCheckpoint(Trainer& trainer, const std::string& dir, const SaveOptions& options,
                           runtime::Communicator& comm);
// Returns the step the checkpoint was saved at.
int64_t LoadCheckpoint(Trainer& trainer, const std::string& dir, runtime::Communicator& comm);

// The newest complete checkpoint under `dir` (`dir/step-<N>` of the largest N), or "" when
// there is none. InvalidArgument ("checkpoint") when `dir` cannot be listed.
std::string LatestCheckpoint(const std::string& dir);

// Tests only: called before every file a save writes, with the writing rank and the file's
// path; a non-zero return is taken as that errno from the write (a full disk: ENOSPC).
// An empty function (the default) injects nothing.
void SetCheckpointWriteFaultForTesting(std::function<int(int64_t rank, const std::string& path)> fault);

}  // namespace spmd::train
