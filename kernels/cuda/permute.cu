// PermuteOnDevice and the strided copy under it (CopyBox uses it too).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>
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

// A TiledTranspose (kernels/cuda/strided.h): blocks of 32 x 8 threads move 32 x 32 tiles,
// reading rows of the tile along j (contiguous in the source) and writing them along b
// (contiguous in the destination) through shared memory (33 columns: no bank conflicts).
// grid.x: tiles of b, grid.y: tiles of j, grid.z strides over the batch.
template <typename U>
__global__ void TiledTransposeKernel(const U* __restrict__ src, U* __restrict__ dst, StridedIndexer<2> batch,
                                     int64_t batches, int64_t nb, int64_t nj, int64_t src_b_stride,
                                     int64_t dst_j_stride) {
  __shared__ U tile[kTile][kTile + 1];
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int64_t k = blockIdx.z; k < batches; k += gridDim.z) {  // the same count for the whole block
    int64_t off[2];
    batch.Offsets(k, off);
    const U* s = src + off[0];
    U* d = dst + off[1];
    for (int r = ty; r < kTile; r += kTile / 4) {
      const int64_t b = b0 + r, j = j0 + tx;
      if (b < nb && j < nj) tile[r][tx] = s[j + b * src_b_stride];
    }
    __syncthreads();
    for (int r = ty; r < kTile; r += kTile / 4) {
      const int64_t j = j0 + r, b = b0 + tx;
      if (b < nb && j < nj) d[j * dst_j_stride + b] = tile[tx][r];
    }
    __syncthreads();  // the tile is refilled for the next batch entry
  }
}

template <typename U>
void LaunchTiled(const std::byte* src, std::byte* dst, const TiledTranspose& t, cudaStream_t stream) {
  const int64_t batches = t.batch.numel();
  const dim3 grid(static_cast<unsigned>((t.b + kTile - 1) / kTile), static_cast<unsigned>((t.j + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(batches, 65535)));
  const dim3 block(kTile, kTile / 4);
  TiledTransposeKernel<U><<<grid, block, 0, stream>>>(reinterpret_cast<const U*>(src) + t.src_base,
                                                      reinterpret_cast<U*>(dst) + t.dst_base,
                                                      MakeIndexer<2>(t.batch), batches, t.b, t.j,
                                                      t.src_b_stride, t.dst_j_stride);
  SPMD_CUDA_CHECK_LAUNCH();
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
  if (plan.numel() <= 0) return;
  const bool aligned = reinterpret_cast<uintptr_t>(src) % element_size == 0 &&
                       reinterpret_cast<uintptr_t>(dst) % element_size == 0;
  if (const std::optional<TiledTranspose> t = PlanTiledTranspose(Collapse(plan)); t && aligned) {
    switch (element_size) {
      case 8: LaunchTiled<unsigned long long>(src, dst, *t, s); return;
      case 4: LaunchTiled<unsigned int>(src, dst, *t, s); return;
      case 2: LaunchTiled<unsigned short>(src, dst, *t, s); return;
      case 1: LaunchTiled<unsigned char>(src, dst, *t, s); return;
      default: break;  // other sizes: the strided path
    }
  }
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
