// CUDA kernels of the scatter family (the ops of kernels/cpu/scatter.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterScatterKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
