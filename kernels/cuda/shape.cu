// CUDA kernels of the shape family (the ops of kernels/cpu/shape.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterShapeKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
