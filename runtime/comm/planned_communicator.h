// PlannedCommunicator: the Communicator that runs each call's plan (runtime/comm/nccl_plan.h)
// over a Transport (runtime/comm/plan_runner.h). NcclCommunicator is one over NCCL; the
// simulated NCCL of the tests (runtime/testing/nccl_sim.h) another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/plan_runner.h"

namespace spmd::runtime::nccl {

// The Communicator over a Transport: collectives run their plan and wait for it (so a
// collective has completed when it returns, and a hang fails at the collective that hangs);
// send / recv wait for Synchronize(), which runs the flush plan and waits. With the
// collective check, each collective first all-gathers its record (and all_to_all its
// counts), and the flush first exchanges a header per message. A TransportFailure, a
// mismatch, or a timeout ends the job through Fail(), with a message naming this rank, the
// call and its step: `rank 0: all_reduce(float32, count=4, op=sum) on group [0,1] at step 3:
// timed out after 2 s in ...`.
class PlannedCommunicator : public Communicator {
 public:
  // The bytes handed to the transport: the sum of the posted ops' `handed`.
  ByteCount transport_bytes() const override { return handed_; }
  ByteCount planned_bytes() const { return handed_; }

 protected:
  PlannedCommunicator(int64_t rank, int64_t world_size, CommOptions options,
                      kernels::Device device, kernels::Stream stream);
  // The transport the plans run on (set by the subclass before the first call).
  void SetTransport(Transport* transport) { transport_ = transport; }
  // Ends the job (or, on threads, this rank) with `message`; never returns.
  [[noreturn]] virtual void Fail(const std::string& message) = 0;

 private:
  void Run(const Call& call) override;
  void DoSynchronize() override;
  void CheckCollective(const Call& call);

  Transport* transport_ = nullptr;
  std::vector<Call> pending_;
  ByteCount handed_;
};

}  // namespace spmd::runtime::nccl
