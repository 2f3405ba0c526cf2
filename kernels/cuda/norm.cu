// CUDA kernels of the norm family (the ops of kernels/cpu/norm.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterNormKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
