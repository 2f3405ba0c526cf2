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
void LaunchUnits(const std::byte* src, std::byte* dst, const StridedPlan& plan, cudaStream_t stream) {
  const SplitPlan split = SplitOuter(plan);
  const StridedIndexer<2> ix = MakeIndexer<2>(split.inner);
  const int64_t n = split.inner.numel();
  for (const std::vector<int64_t>& start : OuterStarts(split.outer)) {
    LaunchGridStride(StridedCopyKernel<U>, n, stream, reinterpret_cast<const U*>(src) + start[0],
                     reinterpret_cast<U*>(dst) + start[1], ix, n);
  }
}

}  // namespace

void CopyStrided(const std::byte* src, std::byte* dst, const StridedPlan& plan, size_t element_size,
                 Stream stream) {
  if (plan.numel() <= 0) return;
  const size_t unit = ChooseUnit(plan, element_size,
                                 {reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst)});
  const StridedPlan p = Collapse(InUnits(plan, element_size, unit));
  cudaStream_t s = ToCuda(stream);
  if (p.dims.size() == 1 && p.strides[0][0] == 1 && p.strides[1][0] == 1) {
    SPMD_CUDA_CHECK(cudaMemcpyAsync(dst + p.base[1] * static_cast<int64_t>(unit),
                                    src + p.base[0] * static_cast<int64_t>(unit),
                                    static_cast<size_t>(p.dims[0]) * unit, cudaMemcpyDefault, s));
    return;
  }
  switch (unit) {
    case 16: LaunchUnits<uint4>(src, dst, p, s); return;
    case 8: LaunchUnits<unsigned long long>(src, dst, p, s); return;
    case 4: LaunchUnits<unsigned int>(src, dst, p, s); return;
    case 2: LaunchUnits<unsigned short>(src, dst, p, s); return;
    default: LaunchUnits<unsigned char>(src, dst, p, s); return;
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
