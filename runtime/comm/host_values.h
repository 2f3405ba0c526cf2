// Collectives on small host arrays: the control plane (a tensor's header, the sizes of an
// op's data-dependent dims, training's agreement on errors, manifests and nonces) through
// `comm`, whatever its device. On a host communicator each is the call itself. On a device
// communicator the values go up to a buffer of its device (the Backend's CopyFromHost, on
// the communicator's stream), the call runs there, and the result comes back by CopyToHost;
// the function returns once the stream has run it, so the result is on the host.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/comm/communicator.h"

namespace spmd::runtime {

void HostAllReduce(int64_t* values, int64_t count, ReduceOp op, const Group& group, Communicator& comm);
void HostAllReduce(double* values, int64_t count, ReduceOp op, const Group& group, Communicator& comm);
void HostBroadcast(int64_t* values, int64_t count, int64_t root, const Group& group, Communicator& comm);
// recv holds every member's counts[q] values in group order.
void HostAllGather(const int64_t* send, int64_t* recv, std::span<const int64_t> counts, const Group& group,
                   Communicator& comm);

}  // namespace spmd::runtime
