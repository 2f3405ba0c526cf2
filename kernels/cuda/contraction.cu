// CUDA kernels of the contraction family (the ops of kernels/cpu/contraction.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterContractionKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
