// The NCCL backend of Communicator: buffers on one CUDA device, calls ordered on one CUDA
// stream, bytes moved by NCCL. Built when CUDA and NCCL are found (SPMD_HAVE_NCCL).
//
// - What runs is the plan of runtime/comm/nccl_plan.h (the NCCL calls of each collective, the
//   ToTruth / divide / box steps on the CUDA Backend, the bytes each call hands NCCL);
//   this file only carries the NCCL calls out and waits for them. Collectives have
//   completed when the call returns (the communicator waits for its stream), so a hang
//   fails at the collective that hangs; send / recv wait for Synchronize(), which posts
//   them all as one NCCL group.
// - The world: rank 0 makes the ncclUniqueId and broadcasts it over MPI; every rank creates
//   its NCCL communicator nonblocking (ncclConfig_t blocking = 0) on its device. A group's
//   communicator is created on the first call on that group, by its members alone, and
//   cached: the members exchange a handshake over MPI point to point (the group's hash, and
//   from position 0 a fresh ncclUniqueId; a member that disagrees on the group or its
//   order is named), then call ncclCommInitRank with rank = position. (ncclCommSplit would
//   need every rank of the world to call it, but a group's collectives are called by its
//   members only.) A group equal to the world in rank order uses the world's communicator.
// - Control messages go over MPI on a private duplicate of the world, polled to the
//   deadline: the group handshake, and with SPMD_DEBUG=collectives the descriptor records
//   of each collective (every member sends its record to every other one) and the
//   {dtype, count, step} header of each message. Data goes over NCCL only.
// - Waits (every NCCL call that returns ncclInProgress, the stream of each call, group
//   creation) poll ncclCommGetAsyncError / cudaStreamQuery until done or until
//   options().timeout_s (SPMD_COLLECTIVE_TIMEOUT_S) passes. A timeout, an NCCL or CUDA
//   error, or a mismatch prints one line naming this rank, the call and its step, e.g.
//     spmd: rank 1: all_reduce(float32, count=4, op=sum) on group [0,1] at step 3: timed
//           out after 2 s in ncclReduceScatter on group [0,1]
//   dumps the flight record, aborts every NCCL communicator (ncclCommAbort) and then the
//   job (MPI_Abort).
// - transport_bytes(): the bytes of each posted NCCL call by its definition (nccl_plan.h),
//   added as the call is posted.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>

#include "kernels/device.h"
#include "runtime/comm/planned_communicator.h"

namespace spmd::runtime {

class NcclTransport;

class NcclCommunicator final : public nccl::PlannedCommunicator {
 public:
  // Collective over `world` (MPI initialised; destroy this before MPI_Finalize). `device`:
  // the CUDA device of this rank's buffers (default: the node-local rank, from
  // OMPI_COMM_WORLD_LOCAL_RANK, modulo the number of devices); `stream`: the stream its
  // calls are ordered on (default: a new stream of that device). Registers the CUDA
  // Backend (EnableCuda). Throws SpmdError(kUnsupported, "device") without a GPU, and
  // CommError when NCCL cannot be set up.
  explicit NcclCommunicator(MPI_Comm world = MPI_COMM_WORLD,
                            CommOptions options = CommOptions::FromEnv(),
                            std::optional<int> device = std::nullopt,
                            std::optional<kernels::Stream> stream = std::nullopt);
  ~NcclCommunicator() override;

  // Prints `spmd: <message>`, dumps the flight record, aborts the NCCL communicators and
  // the job.
  [[noreturn]] void AbortJob(const std::string& message) const;

 private:
  NcclCommunicator(MPI_Comm world, CommOptions options, int device, kernels::Stream stream);
  void Fail(const std::string& message) override { AbortJob(message); }

  MPI_Comm parent_;
  std::unique_ptr<NcclTransport> transport_;
};

// The device NcclCommunicator picks by default for this process (see above).
int DefaultNcclDevice();

}  // namespace spmd::runtime
