#include "runtime/comm/host_values.h"

#include <algorithm>
#include <numeric>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "rules/model/error.h"

namespace spmd::runtime {
namespace {

// A buffer of `count` elements on the communicator's device, holding `values` when given
// (CopyFromHost reads them before it returns).
kernels::Tensor Up(const void* values, int64_t count, DType dtype, Communicator& comm) {
  kernels::Backend& backend = kernels::BackendFor(comm.device());
  kernels::Tensor t = kernels::Tensor::Uninitialized({count}, dtype, backend.AllocatorFor(comm.device()), comm.stream());
  if (values != nullptr) backend.CopyFromHost(t.bytes(), values, t.nbytes(), comm.stream());
  return t;
}

// `t`'s values into `values` once the stream has run everything queued before.
void Down(const kernels::Tensor& t, void* values, Communicator& comm) {
  kernels::Backend& backend = kernels::BackendFor(comm.device());
  backend.CopyToHost(values, t.bytes(), t.nbytes(), comm.stream());
  backend.Synchronize(comm.stream());
}

void AllReduceValues(void* values, int64_t count, DType dtype, ReduceOp op, const Group& group, Communicator& comm) {
  if (comm.device().is_host()) return comm.AllReduce(values, values, count, dtype, op, group);
  kernels::Tensor t = Up(values, count, dtype, comm);
  comm.AllReduce(t.bytes(), t.bytes(), count, dtype, op, group);
  Down(t, values, comm);
}

}  // namespace

void HostAllReduce(int64_t* values, int64_t count, ReduceOp op, const Group& group, Communicator& comm) {
  AllReduceValues(values, count, DType::kInt64, op, group, comm);
}

void HostAllReduce(double* values, int64_t count, ReduceOp op, const Group& group, Communicator& comm) {
  AllReduceValues(values, count, DType::kFloat64, op, group, comm);
}

void HostBroadcast(int64_t* values, int64_t count, int64_t root, const Group& group, Communicator& comm) {
  if (comm.device().is_host()) return comm.Broadcast(values, count, DType::kInt64, root, group);
  kernels::Tensor t = Up(values, count, DType::kInt64, comm);
  comm.Broadcast(t.bytes(), count, DType::kInt64, root, group);
  Down(t, values, comm);
}

void HostAllGather(const int64_t* send, int64_t* recv, std::span<const int64_t> counts, const Group& group,
                   Communicator& comm) {
  if (comm.device().is_host()) return comm.AllGather(send, recv, counts, DType::kInt64, group);
  const auto position = static_cast<size_t>(std::find(group.begin(), group.end(), comm.rank()) - group.begin());
  if (position >= counts.size()) ThrowInvalid("group", "this rank is not in the group");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const kernels::Tensor mine = Up(send, counts[position], DType::kInt64, comm);
  kernels::Tensor all = Up(nullptr, total, DType::kInt64, comm);
  comm.AllGather(mine.bytes(), all.bytes(), counts, DType::kInt64, group);
  Down(all, recv, comm);
}

}  // namespace spmd::runtime
