// Moving elements between layouts, by bytes (any dtype): the permutation behind
// transpose, and the relayouts that einsum and multi-axis reductions use. Internal to
// kernels/cpu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace spmd::kernels::cpu::internal {

// dst (row-major, shape out[i] = in_shape[perm[i]]) = src (row-major, in_shape) permuted:
// out index (i_0, .., i_{r-1}) reads src at in index with in[perm[k]] = i_k. `perm` must
// be a permutation of 0..rank-1. Size-1 dims are dropped and dims adjacent in both layouts
// merged first; contiguous rows are copied with memcpy, a transposed pair of dims is
// copied in cache tiles.
void PermuteBytes(std::byte* dst, const std::byte* src, const Shape& in_shape,
                  const std::vector<int64_t>& perm, size_t element_size);

// Typed convenience: returns src permuted (a copy even for the identity permutation).
template <typename T>
std::vector<T> Permuted(const T* src, const Shape& in_shape, const std::vector<int64_t>& perm) {
  std::vector<T> out(static_cast<size_t>(NumElements(in_shape)));
  PermuteBytes(reinterpret_cast<std::byte*>(out.data()), reinterpret_cast<const std::byte*>(src),
               in_shape, perm, sizeof(T));
  return out;
}

}  // namespace spmd::kernels::cpu::internal
