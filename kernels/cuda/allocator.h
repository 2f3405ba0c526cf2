// The CUDA devices' allocators (kernels/allocator.h): one per device, over the device's
// default stream-ordered memory pool. Plain C++ declarations; kernels/cuda/allocator.cu.
#pragma once

#include "kernels/allocator.h"
#include "kernels/cuda/pool_stats.h"

namespace spmd::kernels::cuda {

// The allocator of CUDA device `index` (created on first use; lives as long as the
// process). Throws SpmdError(kInvalidArgument, "device") for an index this process cannot
// use.
Allocator& CudaAllocatorFor(int index);

}  // namespace spmd::kernels::cuda
