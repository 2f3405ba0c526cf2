// CUDA kernels of the sort family (the ops of kernels/cpu/sort.cc).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

void RegisterSortKernels(KernelTable& table) { (void)table; }

}  // namespace spmd::kernels::cuda
