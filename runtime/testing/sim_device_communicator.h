// The NCCL backend's plans (runtime/comm/nccl_plan.h) on simulated devices (kernels/sim/sim.h):
// PlannedCommunicator, exactly as NcclCommunicator runs it, with each rank's buffers on a
// sim device and its calls ordered on a sim stream, over the simulated NCCL of
// runtime/testing/nccl_sim.h. So the NCCL code path (plans, scratch from the device's
// stream-ordered pool, local steps through the device's Backend on the communicator's
// stream) runs, and its ordering is checked, without NCCL or a GPU. Test support.
//
// How a group runs: the transport synchronizes the communicator's stream (the plan's local
// steps and the caller's work queued there before the call), checks every buffer the group
// reads or writes (kernels::sim::CheckHostAccess: live memory, and no write pending on
// another stream: a send buffer produced on another stream without an event wait is a
// HazardError), then runs the simulated NCCL group on the device memory. The group has
// completed when it returns, so work enqueued afterwards on the stream sees its results.
// A failure (a hazard, a pending device error) is a TransportFailure: the world ends, with
// the message naming the rank and the call, as for the host simulation.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "runtime/testing/nccl_sim.h"

namespace spmd::runtime::nccl {

// One rank's simulated NCCL on sim device memory, ordered on `stream`.
class SimDeviceTransport final : public Transport {
 public:
  SimDeviceTransport(SimWorld& world, int64_t rank, kernels::Stream stream)
      : inner_(world, rank), rank_(rank), stream_(stream) {}
  void RunGroup(const Group& group, bool world, std::span<const Op> ops,
                std::span<void* const> buffers) override;
  void Wait(const std::string& what) override;
  std::vector<int64_t> AllGatherInts(const Group& group, std::span<const int64_t> mine) override {
    return inner_.AllGatherInts(group, mine);
  }
  std::vector<Header> ExchangeHeaders(std::span<const int64_t> send_peers,
                                      std::span<const Header> headers,
                                      std::span<const int64_t> recv_peers) override {
    return inner_.ExchangeHeaders(send_peers, headers, recv_peers);
  }

 private:
  SimTransport inner_;
  int64_t rank_;
  kernels::Stream stream_;
};

// Rank `rank` of `world` on sim device `device`, its calls ordered on `stream` (a stream of
// that device no other rank uses).
class SimDeviceCommunicator final : public PlannedCommunicator {
 public:
  SimDeviceCommunicator(SimWorld& world, int64_t rank, kernels::Device device, kernels::Stream stream);
  ByteCount transport_bytes() const override { return world_.copied(rank()); }

 private:
  [[noreturn]] void Fail(const std::string& message) override;

  SimWorld& world_;
  SimDeviceTransport transport_;
};

// Runs fn(comm) on `size` thread ranks, rank r on Device::Sim(r % kMaxSimDevices), as
// RunSimRanks does: throws CommError with the first failure's message. Rank r's stream is
// the same in every call (streams, each with its worker thread, live as long as the
// process, so they are reused rather than made anew).
void RunSimDeviceRanks(int64_t size, const std::function<void(Communicator&)>& fn,
                       CommOptions options = CommOptions::FromEnv());

}  // namespace spmd::runtime::nccl
