// CUDA kernels of the random family (the ops of kernels/cpu/random.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterRandomKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
