#include "runtime/testing/sim_device_communicator.h"

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>

#include "kernels/backend.h"
#include "kernels/sim/sim.h"

namespace spmd::runtime::nccl {
namespace {

// Synchronizes `stream`; a pending device error becomes a TransportFailure.
void SyncStream(kernels::Stream stream) {
  try {
    kernels::BackendFor(kernels::sim::DeviceOf(stream)).Synchronize(stream);
  } catch (const std::exception& e) {
    throw TransportFailure(std::string("the device reported: ") + e.what());
  }
}

// Rank r's device and stream (one stream per rank, made on first use).
std::pair<kernels::Device, kernels::Stream> RankPlace(int64_t rank) {
  static std::mutex mu;
  static std::map<int64_t, kernels::Stream>* streams = new std::map<int64_t, kernels::Stream>;
  const kernels::Device device = kernels::Device::Sim(static_cast<int>(rank % kernels::sim::kMaxSimDevices));
  std::lock_guard<std::mutex> lock(mu);
  auto found = streams->find(rank);
  if (found == streams->end()) found = streams->emplace(rank, kernels::sim::NewStream(device)).first;
  return {device, found->second};
}

}  // namespace

void SimDeviceTransport::RunGroup(const Group& group, bool world, std::span<const Op> ops,
                                  std::span<void* const> buffers) {
  SyncStream(stream_);
  const auto n = static_cast<int64_t>(group.size());
  const int64_t position =
      world ? rank_ : static_cast<int64_t>(std::find(group.begin(), group.end(), rank_) - group.begin());
  auto at = [&](const Ref& r) {
    return static_cast<const std::byte*>(buffers[static_cast<size_t>(r.buffer)]) + r.offset;
  };
  try {
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const int64_t bytes = op.count * SizeOf(op.type);
      int64_t in = 0, out = 0;
      switch (op.prim) {
        case Prim::kAllGather: in = bytes, out = bytes * n; break;
        case Prim::kReduceScatter: in = bytes * n, out = bytes; break;
        case Prim::kReduce: in = bytes, out = op.peer == position ? bytes : 0; break;
        case Prim::kBroadcast: in = op.peer == position ? bytes : 0, out = bytes; break;
        case Prim::kSend: in = bytes; break;
        case Prim::kRecv: out = bytes; break;
      }
      const std::string name(ToString(op.prim));
      if (in > 0 && op.in.buffer >= 0) {
        kernels::sim::CheckHostAccess(at(op.in), static_cast<size_t>(in), name + " sendbuff");
      }
      if (out > 0 && op.out.buffer >= 0) {
        kernels::sim::CheckHostAccess(at(op.out), static_cast<size_t>(out), name + " recvbuff",
                                      /*write=*/true);
      }
    }
  } catch (const std::exception& e) {
    throw TransportFailure(e.what());
  }
  inner_.RunGroup(group, world, ops, buffers);
}

void SimDeviceTransport::Wait(const std::string& what) {
  inner_.Wait(what);
  SyncStream(stream_);
}

SimDeviceCommunicator::SimDeviceCommunicator(SimWorld& world, int64_t rank, kernels::Device device,
                                             kernels::Stream stream)
    : PlannedCommunicator(rank, world.size(), world.options(), device, stream),
      world_(world),
      transport_(world, rank, stream) {
  SetTransport(&transport_);
}

void SimDeviceCommunicator::Fail(const std::string& message) {
  world_.Abort(message);
  throw CommError(message);
}

void RunSimDeviceRanks(int64_t size, const std::function<void(Communicator&)>& fn, CommOptions options) {
  SimWorld world(size, options);
  RunSimWorld(world, [&world](int64_t r) -> std::unique_ptr<Communicator> {
    const auto [device, stream] = RankPlace(r);
    return std::make_unique<SimDeviceCommunicator>(world, r, device, stream);
  }, fn);
}

}  // namespace spmd::runtime::nccl
