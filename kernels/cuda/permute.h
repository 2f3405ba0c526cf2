// Layout changes on the device, shared by the families (transpose, einsum's operand
// layouts, the contractions' batched views). Plain C++ declarations; kernels/cuda/permute.cu
// has the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/strided.h"
#include "kernels/device.h"
#include "kernels/tensor.h"

namespace spmd::kernels::cuda {

// out = x with its dims permuted: out.shape[i] = x.shape[perm[i]] (perm a permutation of
// 0..rank-1, checked by the caller), any dtype, on x's device and stream. The identity
// permutation is a plain device copy.
Tensor PermuteOnDevice(const Tensor& x, const std::vector<int64_t>& perm);

// Moves the walk of `plan` (kernels/cuda/strided.h: two operands, offsets in elements of
// `element_size` bytes): operand 0 read from `src`, operand 1 written to `dst`, ordered on
// `stream`, on the calling thread's current device (the caller sets it: DeviceGuard). In
// the widest unit the addresses allow; one cudaMemcpyAsync where the walk is one
// contiguous run in both; dims beyond kMaxStridedDims become a host loop of launches.
void CopyStrided(const std::byte* src, std::byte* dst, const StridedPlan& plan, size_t element_size,
                 Stream stream);

}  // namespace spmd::kernels::cuda
