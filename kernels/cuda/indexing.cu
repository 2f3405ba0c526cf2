// CUDA kernels of the indexing family (the ops of kernels/cpu/indexing.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterIndexingKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
