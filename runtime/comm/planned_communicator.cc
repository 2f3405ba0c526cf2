#include "runtime/comm/planned_communicator.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace spmd::runtime::nccl {

PlannedCommunicator::PlannedCommunicator(int64_t rank, int64_t world_size, CommOptions options,
                                         kernels::Device device, kernels::Stream stream)
    : Communicator(rank, world_size, std::move(options), device, stream) {}

void PlannedCommunicator::CheckCollective(const Call& call) {
  const CollectiveDesc& d = call.desc;
  const Record mine = MakeRecord(d, call.step);
  const std::vector<int64_t> all = transport_->AllGatherInts(d.group, mine);
  std::vector<Record> records(d.group.size());
  for (size_t q = 0; q < records.size(); ++q) {
    std::copy_n(all.begin() + static_cast<int64_t>(q) * kRecordSize, kRecordSize, records[q].begin());
  }
  std::string mismatch = CompareRecords(records, d.group);
  if (mismatch.empty() && d.kind == Collective::kAllToAll) {
    mismatch = CompareAllToAllCounts(transport_->AllGatherInts(d.group, AllToAllCounts(d)), d.group);
  }
  if (!mismatch.empty()) Fail(Describe(call) + ": " + mismatch);
}

void PlannedCommunicator::Run(const Call& call) {
  if (call.desc.kind == Collective::kSend || call.desc.kind == Collective::kRecv) {
    pending_.push_back(call);
    return;
  }
  std::string failure;
  try {
    if (options().check_collectives) CheckCollective(call);
    const Plan plan = PlanCollective(call.desc, call.position);
    // The plan reads `send` and writes `recv` (broadcast: its one buffer).
    std::vector<void*> buffers = {nullptr, const_cast<void*>(call.send), call.recv};
    RunPlan(plan, std::move(buffers), call.desc.group, *transport_, backend(),
            backend().AllocatorFor(device()), stream(), handed_);
    transport_->Wait(std::string(ToString(call.desc.kind)));
    return;
  } catch (const TransportFailure& f) {
    failure = f.what();
  }
  Fail(Describe(call) + ": " + failure);
}

void PlannedCommunicator::DoSynchronize() {
  if (pending_.empty()) return;
  std::vector<Call> calls;
  calls.swap(pending_);
  std::vector<PointToPoint> messages;
  std::vector<void*> buffers = {nullptr};
  for (const Call& c : calls) {
    const bool send = c.desc.kind == Collective::kSend;
    messages.push_back({c.desc.kind, c.desc.dtype, c.desc.counts.at(0), c.desc.root, c.box});
    buffers.push_back(send ? const_cast<void*>(c.send) : c.recv);
  }
  std::string failure;
  const Call* failed = &calls.front();
  try {
    if (options().check_collectives) {
      std::vector<int64_t> send_peers;
      std::vector<Header> headers;
      std::vector<int64_t> recv_peers;
      std::vector<size_t> recvs;
      for (size_t i = 0; i < calls.size(); ++i) {
        if (messages[i].kind == Collective::kSend) {
          send_peers.push_back(messages[i].peer);
          headers.push_back(MakeHeader(messages[i], calls[i].step));
        } else {
          recv_peers.push_back(messages[i].peer);
          recvs.push_back(i);
        }
      }
      const std::vector<Header> got = transport_->ExchangeHeaders(send_peers, headers, recv_peers);
      for (size_t k = 0; k < recvs.size(); ++k) {
        const std::string mismatch = CompareHeader(got.at(k), messages[recvs[k]]);
        if (!mismatch.empty()) Fail(Describe(calls[recvs[k]]) + ": " + mismatch);
      }
    }
    const Plan plan = PlanPointToPoint(messages);
    Group world(static_cast<size_t>(world_size()));
    std::iota(world.begin(), world.end(), int64_t{0});
    RunPlan(plan, std::move(buffers), world, *transport_, backend(),
            backend().AllocatorFor(device()), stream(), handed_);
    transport_->Wait("waiting for the point-to-point peers");
    return;
  } catch (const TransportFailure& f) {
    failure = f.what();
  }
  Fail(Describe(*failed) + ": " + failure);
}

}  // namespace spmd::runtime::nccl
