// The CUDA device's HostStaging (runtime/comm/staged_communicator.h): device buffers carried over
// a host communicator (MPI) by copies through host memory. How spmd-train --device cuda
// moves its collectives when ranks share a GPU, which one NCCL communicator does not allow
// (docs/DECISIONS.md "spmd-train --device cuda: NCCL, or MPI staging for ranks sharing a
// GPU"). Library spmd_runtime_staged_cuda, built with CUDA only. Plain C++ (no CUDA header).
// Not yet run on a GPU.
#pragma once

#include "runtime/comm/staged_communicator.h"

namespace spmd::runtime {

// cudaMemcpyAsync on the communicator's stream, then cudaStreamSynchronize of that stream:
// each copy has completed when the call returns (the staged communicator has synchronized
// the stream before, so what produced a send buffer has run). A CUDA error throws
// std::runtime_error naming the copy and CUDA's message (the staged communicator turns it
// into a CommError naming the rank, the call and its step).
HostStaging& CudaHostStaging();

}  // namespace spmd::runtime
