// CUDA kernels of the fused family (the ops of kernels/cpu/fused.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterFusedKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
