// CUDA kernels of the reduction family (the ops of kernels/cpu/reduction.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterReductionKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
