// CUDA kernels of the elementwise family (the ops of kernels/cpu/elementwise.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterElementwiseKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
