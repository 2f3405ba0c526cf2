// PermuteOnDevice and the strided copy under it (CopyBox uses it too).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/strided.h"

namespace spmd::kernels::cuda {
namespace {

// One unit per thread and step; writes are in the walk's order (the destination is the
// contiguous side of a permute), reads follow the source strides.
template <typename U>
__global__ void StridedCopyKernel(const U* __restrict__ src, U* __restrict__ dst, StridedIndexer<2> ix,
                                  int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) {
    int64_t off[2];
    ix.Offsets(i, off);
    dst[off[1]] = src[off[0]];
  }
}

template <typename U>
void Launch(const std::byte* src, std::byte* dst, const StridedCopyStep& step, cudaStream_t stream) {
  LaunchGridStride(StridedCopyKernel<U>, step.n, stream, reinterpret_cast<const U*>(src) + step.src_offset,
                   reinterpret_cast<U*>(dst) + step.dst_offset, step.ix, step.n);
}

}  // namespace

void CopyStrided(const std::byte* src, std::byte* dst, const StridedPlan& plan, size_t element_size,
                 Stream stream) {
  cudaStream_t s = ToCuda(stream);
  for (const StridedCopyStep& step : PlanStridedCopy(plan, element_size, reinterpret_cast<uintptr_t>(src),
                                                     reinterpret_cast<uintptr_t>(dst))) {
    const int64_t unit = static_cast<int64_t>(step.unit);
    if (step.contiguous) {
      SPMD_CUDA_CHECK(cudaMemcpyAsync(dst + step.dst_offset * unit, src + step.src_offset * unit,
                                      static_cast<size_t>(step.n * unit), cudaMemcpyDefault, s));
      continue;
    }
    switch (step.unit) {
      case 16: Launch<uint4>(src, dst, step, s); break;
      case 8: Launch<unsigned long long>(src, dst, step, s); break;
      case 4: Launch<unsigned int>(src, dst, step, s); break;
      case 2: Launch<unsigned short>(src, dst, step, s); break;
      default: Launch<unsigned char>(src, dst, step, s); break;
    }
  }
}

Tensor PermuteOnDevice(const Tensor& x, const std::vector<int64_t>& perm) {
  Shape shape(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) shape[i] = x.shape()[perm[i]];
  Tensor out = NewOutput(x, shape, x.dtype());
  if (out.numel() == 0) return out;
  DeviceGuard guard(x.device());
  CopyStrided(x.bytes(), out.bytes(), PlanPermute(x.shape(), perm), x.element_size(), x.stream());
  return out;
}

}  // namespace spmd::kernels::cuda
