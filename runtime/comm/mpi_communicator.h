// The Open MPI backend of Communicator.
//
// - One MPI communicator per group (its ranks in the group's order), created on the first
//   call on that group and cached: MPI_Comm_create_group, collective over the group only,
//   so sub-groups are created by their members alone. Before creating it the members
//   exchange a token over point-to-point messages (bounded by the watchdog below, so a
//   missing member times out instead of hanging).
// - Collectives are the blocking MPI calls (MPI_Allgatherv, MPI_Reduce_scatter,
//   MPI_Allreduce, MPI_Alltoallv, MPI_Bcast, MPI_Barrier): Open MPI's tuned algorithms,
//   complete when the call returns. Send / Recv are MPI_Isend / MPI_Irecv on a private
//   duplicate of the world, completed by Synchronize() (MPI_Waitall).
// - Bounded time: a watchdog thread bounds every blocking MPI call (and every MPI_Waitall)
//   by options().timeout_s. The communicator arms it before the call and disarms it after
//   (one uncontended lock, no wake-up); a call still armed at its deadline makes the
//   watchdog print the timeout line below, dump the flight record and end the process
//   with _Exit(kTimeoutExitCode): not MPI_Abort, which under MPI_Init's
//   MPI_THREAD_SINGLE only the main thread may call. mpirun then ends the rest of the job
//   (a rank that exits without MPI_Finalize aborts it), and the other members of a hung
//   collective are ended by their own watchdogs. (Until this, the collectives were MPI_I*
//   calls polled with MPI_Testall so that the main thread itself could give up at the
//   deadline; Open MPI runs those through libnbc, 1.3-3.5x slower than the tuned
//   blocking algorithms on this machine: docs/BENCHMARKS.md.)
// - all_reduce: one MPI_Allreduce (avg: MPI_SUM, then divided). transport_bytes() counts
//   it as the ring algorithm (a reduce-scatter then an all-gather over the balanced split
//   of the buffer: communicator.h's accounting), which is what Open MPI's tuned ring moves;
//   for small buffers Open MPI may pick an algorithm that moves more (recursive doubling:
//   log2(n) buffers).
// - transport_bytes(): next to every MPI data call, the bytes its counts and datatypes
//   (MPI_Type_size) hand MPI: its buffer to each other member, or each other member's
//   part to it, as the call's definition moves them; Isend / Irecv: count x type size
//   (a subarray type: the elements it selects).
// - avg: MPI_SUM, then divide by the group size; any / all: map to 0/1, then MPI_MAX /
//   MPI_MIN; bool travels as MPI_C_BOOL.
// - Counts and displacements must fit in an int (MPI 3); larger calls throw Unsupported.
// - Two members that disagree on a group's order (or members) are found by the handshake
//   when neither has used that group before; otherwise they wait on different
//   communicators and time out.
//
// Failure (job-wide, bounded): a timeout, an MPI error, or a mismatch found by the
// collective check (options().check_collectives, env SPMD_DEBUG=collectives: before each
// collective the group all-gathers a fixed-size descriptor of every member's call, and
// for all_to_all also the counts each member sends each other one; each send carries a
// {dtype, count, step} header that the receiver compares at Synchronize()) prints one line to
// stderr, e.g.
//   spmd: rank 0: all_reduce(float64, count=4, op=sum) on group [0,1] at step 3: timed out
//         after 2 s in MPI_Allreduce
//   spmd: rank 2: all_reduce(float64, count=4, op=sum) on group [0,1,2,3] at step 3:
//         collective mismatch: rank 0 calls all_reduce(float64, count=4, op=sum) at its
//         step 3, rank 1 calls all_gather(float64, counts=[4,4,4,4]) at its step 3
// and calls MPI_Abort (a timeout: _Exit from the watchdog, above), so that every rank of the
// job ends.
#pragma once

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace spmd::runtime {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `world` (duplicates it). MPI must be initialised; destroy the
  // communicator before MPI_Finalize.
  explicit MpiCommunicator(MPI_Comm world = MPI_COMM_WORLD,
                           CommOptions options = CommOptions::FromEnv());
  ~MpiCommunicator() override;

  ByteCount transport_bytes() const override { return transport_; }

  // Prints `spmd: <message>` to stderr and aborts the job (MPI_Abort on the world).
  [[noreturn]] void AbortJob(const std::string& message) const;

 private:
  void Run(const Call& call) override;
  void DoSynchronize() override;

  // The cached communicator of `group` (rank order = group order).
  MPI_Comm GroupComm(const Call& call);
  // Completes `requests` (MPI_Waitall) under the watchdog.
  void Wait(MPI_Request* requests, int count, const Call& call, const char* what);
  void Wait(std::vector<MPI_Request>& requests, const Call& call, const char* what) {
    Wait(requests.data(), static_cast<int>(requests.size()), call, what);
  }
  // Runs one blocking MPI call (it returns its MPI error code) under the watchdog: armed
  // with the call's deadline before, disarmed after; then Check.
  void Blocking(const Call& call, const char* what, const std::function<int()>& mpi_call);
  // The watchdog's end of a call still blocked at its deadline: prints `spmd: <call>: timed
  // out after T s in <what>`, dumps the flight record and _Exits(kTimeoutExitCode).
  [[noreturn]] void Fire(const std::string& call, const char* what) const;
  // SPMD_DEBUG=collectives: compares the members' descriptors; fails the job on mismatch.
  void CheckCollective(const Call& call, MPI_Comm comm);
  void Check(int mpi_error, const Call& call, const char* what);
  // Counts what one posted MPI call hands the transport.
  void Handed(int64_t sent, int64_t received) {
    transport_.sent += sent;
    transport_.received += received;
  }

  MPI_Comm parent_;  // what MPI_Abort aborts
  MPI_Comm world_;   // private duplicate: point to point and group creation
  std::map<Group, MPI_Comm> group_comms_;
  // A send or recv in flight until Synchronize(); with the collective check, its
  // {dtype, count, step} header travels first (requests[0]).
  struct Pending {
    Call call;
    // The header's (when checked) then the data's; in place, so a message allocates
    // nothing for them.
    std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int count = 0;
    std::unique_ptr<std::array<int64_t, 3>> header;
  };
  // The open messages are pending_[0, open_); the entries past them are kept from earlier
  // steps and reused (their vectors keep their capacity), so a warm message allocates
  // nothing here.
  std::vector<Pending> pending_;
  size_t open_ = 0;
  ByteCount transport_;
  // Reused by the calls that need room of their own (the truth values of any / all), so
  // that a call allocates nothing once warm.
  std::vector<unsigned char> scratch_;
  class Watchdog;
  std::unique_ptr<Watchdog> watchdog_;
};

// The exit status of a rank whose watchdog ended it (a blocking call past its deadline).
inline constexpr int kTimeoutExitCode = 3;

// For MPI programs: MPI_Init, builds the communicator, runs body(comm) and returns its exit
// code after MPI_Finalize. If body throws, prints FailureMessage (`rank R failed at step S
// (collective): what`) to stderr and aborts the job, so that the other ranks end too.
int GuardedMain(int argc, char** argv, const std::function<int(MpiCommunicator&)>& body);

}  // namespace spmd::runtime
