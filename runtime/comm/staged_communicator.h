// A Communicator for device buffers over a host one (MPI): every call stages its buffers
// through host memory. The design for the simulated device under mpirun, where each process
// is one rank with one sim device and Open MPI takes only host pointers. (CUDA buffers
// under MPI go to the NCCL backend, runtime/comm/nccl_communicator.h, instead.)
//
// How a call runs, ordered on the communicator's stream (device(), stream()):
//   1. the stream is synchronized (Backend::Synchronize): the caller's work queued there
//      before the call (what produced the send buffer) has run;
//   2. the send bytes are copied device -> host (HostStaging::ToHost);
//   3. the host communicator runs the same call on host buffers (collectives complete
//      there before it returns);
//   4. the received bytes are copied host -> device (HostStaging::ToDevice).
// So a collective has completed when the call returns, which the contract allows (work
// enqueued on the stream afterwards sees it). Point to point: a Send stages its bytes at
// the call and the host buffer lives until Synchronize(); a Recv (RecvBox: the box packed)
// lands in a host buffer and is copied into the device buffer (box: row by row) by
// Synchronize(), after the host communicator's Synchronize and a synchronization of the
// stream (what was queued there before, the buffer's allocation among it, has run).
//
// The contract's bookkeeping is the base's: counters (each call once, as the caller sees
// it), the flight recorder and phases. The host communicator counts and records the same
// calls on its own (transport_bytes() is its). Failures: a device error found at step 1,
// 2 or 4 is a CommError naming this rank, the call and its step (other ranks then stop at
// their bounded wait, naming theirs); the host communicator's failures are its own (MPI:
// the message names the rank, the call and the step, and the job is aborted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/device.h"
#include "runtime/comm/communicator.h"

namespace spmd::runtime {

// Copies between one device's memory and the host, after the stream has been synchronized.
class HostStaging {
 public:
  virtual ~HostStaging() = default;
  virtual void ToHost(void* host, const void* device, size_t nbytes, kernels::Stream stream) = 0;
  virtual void ToDevice(void* device, const void* host, size_t nbytes, kernels::Stream stream) = 0;
};

// The simulated device's staging (kernels/sim/sim.h): the bytes are copied by the host, as
// the simulated NCCL does, once kernels::sim::CheckHostAccess has found them live and no
// write (for a write: no access) pending on another stream (a HazardError otherwise).
HostStaging& SimHostStaging();

class StagedCommunicator final : public Communicator {
 public:
  // Rank host.rank() of host.world_size(), its buffers on `device` ordered on `stream`.
  // `host` (a host communicator) and `staging` must outlive this one.
  StagedCommunicator(Communicator& host, kernels::Device device, kernels::Stream stream,
                     HostStaging& staging);
  ByteCount transport_bytes() const override { return host_.transport_bytes(); }

 private:
  struct PendingRecv {
    void* device = nullptr;
    std::vector<std::byte> host;
    std::optional<BufferBox> box;
    int64_t element = 0;
    int64_t step = 0;
  };
  void Run(const Call& call) override;
  void DoSynchronize() override;
  std::vector<std::byte> Stage(const void* device, int64_t bytes, const Call& call);
  void Unstage(void* device, const std::vector<std::byte>& host, const Call& call);

  Communicator& host_;
  HostStaging& staging_;
  std::vector<std::vector<std::byte>> pending_sends_;
  std::vector<PendingRecv> pending_recvs_;
};

}  // namespace spmd::runtime
