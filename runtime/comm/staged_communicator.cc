#include "runtime/comm/staged_communicator.h"

#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "kernels/sim/sim.h"
#include "rules/model/dtype.h"

namespace spmd::runtime {
namespace {

class SimStaging final : public HostStaging {
 public:
  void ToHost(void* host, const void* device, size_t nbytes, kernels::Stream) override {
    if (nbytes == 0) return;
    kernels::sim::CheckHostAccess(device, nbytes, "send");
    std::memcpy(host, device, nbytes);
  }
  void ToDevice(void* device, const void* host, size_t nbytes, kernels::Stream) override {
    if (nbytes == 0) return;
    kernels::sim::CheckHostAccess(device, nbytes, "recv", /*write=*/true);
    std::memcpy(device, host, nbytes);
  }
};

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// Calls f(offset, length) in elements for every contiguous row of `box` in its array.
template <typename F>
void ForEachRow(const BufferBox& box, F f) {
  const size_t rank = box.array.size();
  if (rank == 0) {
    f(0, 1);
    return;
  }
  if (box.volume() == 0) return;
  std::vector<int64_t> index(rank - 1, 0);
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t i = box.at[d] + (d + 1 < rank ? index[d] : 0);
      offset = offset * box.array[d] + i;
    }
    f(offset, box.extent[rank - 1]);
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++index[d] < box.extent[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

}  // namespace

HostStaging& SimHostStaging() {
  static SimStaging staging;
  return staging;
}

StagedCommunicator::StagedCommunicator(Communicator& host, kernels::Device device, kernels::Stream stream,
                                       HostStaging& staging)
    : Communicator(host.rank(), host.world_size(), host.options(), device, stream),
      host_(host),
      staging_(staging) {
  if (!host.device().is_host()) ThrowInvalid("host", "a host communicator, got one on " + kernels::ToString(host.device()));
  if (device.is_host()) ThrowInvalid("device", "a device to stage for, not the host");
}

std::vector<std::byte> StagedCommunicator::Stage(const void* device, int64_t bytes, const Call& call) {
  std::vector<std::byte> host(static_cast<size_t>(bytes));
  try {
    staging_.ToHost(host.data(), device, host.size(), stream());
  } catch (const std::exception& e) {
    throw CommError(Describe(call) + ": staging the send buffer to the host: " + e.what());
  }
  return host;
}

void StagedCommunicator::Unstage(void* device, const std::vector<std::byte>& host, const Call& call) {
  try {
    staging_.ToDevice(device, host.data(), host.size(), stream());
  } catch (const std::exception& e) {
    throw CommError(Describe(call) + ": staging the received buffer to the device: " + e.what());
  }
}

void StagedCommunicator::Run(const Call& call) {
  const CollectiveDesc& d = call.desc;
  const int64_t e = ElementSize(d.dtype);
  try {
    backend().Synchronize(stream());  // the caller's work on the stream has run
  } catch (const std::exception& ex) {
    throw CommError(Describe(call) + ": the device reported: " + ex.what());
  }
  const auto p = static_cast<size_t>(call.position);
  switch (d.kind) {
    case Collective::kAllGather: {
      std::vector<std::byte> send = Stage(call.send, d.counts[p] * e, call);
      std::vector<std::byte> recv(static_cast<size_t>(Sum(d.counts) * e));
      host_.AllGather(send.data(), recv.data(), d.counts, d.dtype, d.group);
      Unstage(call.recv, recv, call);
      break;
    }
    case Collective::kReduceScatter: {
      std::vector<std::byte> send = Stage(call.send, Sum(d.counts) * e, call);
      std::vector<std::byte> recv(static_cast<size_t>(d.counts[p] * e));
      host_.ReduceScatter(send.data(), recv.data(), d.counts, d.dtype, d.op, d.group);
      Unstage(call.recv, recv, call);
      break;
    }
    case Collective::kAllReduce: {
      std::vector<std::byte> buffer = Stage(call.send, d.counts[0] * e, call);
      host_.AllReduce(buffer.data(), buffer.data(), d.counts[0], d.dtype, d.op, d.group);
      Unstage(call.recv, buffer, call);
      break;
    }
    case Collective::kAllToAll: {
      std::vector<std::byte> send = Stage(call.send, Sum(d.counts) * e, call);
      std::vector<std::byte> recv(static_cast<size_t>(Sum(d.recv_counts) * e));
      host_.AllToAll(send.data(), d.counts, recv.data(), d.recv_counts, d.dtype, d.group);
      Unstage(call.recv, recv, call);
      break;
    }
    case Collective::kBroadcast: {
      std::vector<std::byte> buffer = d.root == rank() ? Stage(call.send, d.counts[0] * e, call)
                                                       : std::vector<std::byte>(static_cast<size_t>(d.counts[0] * e));
      host_.Broadcast(buffer.data(), d.counts[0], d.dtype, d.root, d.group);
      if (d.root != rank()) Unstage(call.recv, buffer, call);
      break;
    }
    case Collective::kSend: {
      if (call.box) {
        const BufferBox& box = *call.box;
        int64_t whole = 1;
        for (int64_t s : box.array) whole *= s;
        pending_sends_.push_back(Stage(call.send, whole * e, call));
        host_.SendBox(pending_sends_.back().data(), box, d.dtype, d.root);
      } else {
        pending_sends_.push_back(Stage(call.send, d.counts[0] * e, call));
        host_.Send(pending_sends_.back().data(), d.counts[0], d.dtype, d.root);
      }
      break;
    }
    case Collective::kRecv: {
      PendingRecv r{call.recv, std::vector<std::byte>(static_cast<size_t>(d.counts[0] * e)), call.box, e, call.step};
      pending_recvs_.push_back(std::move(r));
      host_.Recv(pending_recvs_.back().host.data(), d.counts[0], d.dtype, d.root);
      break;
    }
    case Collective::kBarrier:
      host_.Barrier(d.group);
      break;
  }
}

void StagedCommunicator::DoSynchronize() {
  host_.Synchronize();
  std::vector<PendingRecv> recvs = std::move(pending_recvs_);
  pending_recvs_.clear();
  pending_sends_.clear();
  if (recvs.empty()) return;
  // What was queued on the stream before (the receive buffers' allocation among it) has
  // run before the host writes them.
  try {
    backend().Synchronize(stream());
  } catch (const std::exception& e) {
    throw CommError("rank " + std::to_string(rank()) + ": synchronize at step " + std::to_string(step()) +
                    ": the device reported: " + e.what());
  }
  for (const PendingRecv& r : recvs) {
    try {
      if (!r.box) {
        staging_.ToDevice(r.device, r.host.data(), r.host.size(), stream());
        continue;
      }
      const std::byte* from = r.host.data();
      ForEachRow(*r.box, [&](int64_t offset, int64_t length) {
        staging_.ToDevice(static_cast<std::byte*>(r.device) + offset * r.element, from,
                          static_cast<size_t>(length * r.element), stream());
        from += length * r.element;
      });
    } catch (const std::exception& e) {
      throw CommError("rank " + std::to_string(rank()) + ": recv at step " + std::to_string(r.step) +
                      ": staging the received buffer to the device: " + e.what());
    }
  }
}

}  // namespace spmd::runtime
