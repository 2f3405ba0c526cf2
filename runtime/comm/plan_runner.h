// Running a plan (runtime/comm/nccl_plan.h): the NCCL calls through a Transport (NCCL itself,
// or the simulated NCCL of the tests), the local steps through a Backend.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/backend.h"
#include "runtime/comm/collective_check.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/nccl_plan.h"

namespace spmd::runtime::nccl {

// A failure a Transport reports (a timeout, an NCCL error, a handshake mismatch); what()
// says what happened, without the rank and call (the communicator adds them).
class TransportFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What carries the NCCL calls: NCCL itself (runtime/comm/nccl_communicator.cc) or the simulated
// NCCL of the tests. Every method throws TransportFailure on failure.
class Transport {
 public:
  virtual ~Transport() = default;
  // Runs `ops` as one NCCL group on the communicator of `group` (ranks = positions; the
  // world's communicator when `world`, group then being every rank in order), with the ops'
  // Refs resolved in `buffers`. Returns once the group is enqueued.
  virtual void RunGroup(const Group& group, bool world, std::span<const Op> ops,
                        std::span<void* const> buffers) = 0;
  // Returns once everything enqueued so far has completed (bounded by the timeout);
  // `what` names the wait in a timeout's message.
  virtual void Wait(const std::string& what) = 0;
  // The collective check: every member's `mine` (the same length on every member) in
  // position order.
  virtual std::vector<int64_t> AllGatherInts(const Group& group, std::span<const int64_t> mine) = 0;
  // The point-to-point check: sends headers[i] to send_peers[i] and returns the headers
  // received from recv_peers (in order; world ranks), as one exchange.
  virtual std::vector<Header> ExchangeHeaders(std::span<const int64_t> send_peers,
                                              std::span<const Header> headers,
                                              std::span<const int64_t> recv_peers) = 0;
};

// Runs `plan` (buffers[kScratch] is ignored: the scratch comes from `allocator` on `stream`,
// freed in stream order after the plan): local steps through `backend` on `stream`, groups
// through `transport`. Adds each op's `handed` to `handed` as its group is posted.
void RunPlan(const Plan& plan, std::vector<void*> buffers, const Group& group,
             Transport& transport, kernels::Backend& backend, kernels::Allocator& allocator,
             kernels::Stream stream, ByteCount& handed);

}  // namespace spmd::runtime::nccl
