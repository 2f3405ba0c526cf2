// Layout changes on the device, shared by the families (transpose, einsum's operand
// layouts, the contractions' batched views). Plain C++ declarations; kernels/cuda/permute.cu
// has the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace spmd::kernels::cuda {

// out = x with its dims permuted: out.shape[i] = x.shape[perm[i]] (perm a permutation of
// 0..rank-1, checked by the caller), any dtype, on x's device and stream. The identity
// permutation is a plain device copy.
Tensor PermuteOnDevice(const Tensor& x, const std::vector<int64_t>& perm);

}  // namespace spmd::kernels::cuda
