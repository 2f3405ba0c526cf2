// Stable key-value sorts on the device through CUB, with their temporary storage from the
// tensors' allocator on their stream (scatter.cu, sort.cu).
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <cstdint>

#include "kernels/cuda/family_util.cuh"

namespace spmd::kernels::cuda::detail {

template <typename I>
__global__ void OffsetsKernel(I* p, int64_t n, int64_t step) {
  for (SPMD_GRID_STRIDE(i, n)) { p[i] = i * step; }
}

// p[i] = i * step for i < n.
inline void FillOffsets(Tensor& offsets, int64_t n, int64_t step, cudaStream_t stream) {
  const LaunchConfig cfg = GridStride(n);
  OffsetsKernel<int64_t><<<cfg.grid, cfg.block, 0, stream>>>(reinterpret_cast<int64_t*>(offsets.bytes()), n, step);
  SPMD_CUDA_CHECK_LAUNCH();
}

// A scratch buffer of `bytes` bytes on `like`'s device and stream.
inline Tensor Scratch(const Tensor& like, int64_t bytes) {
  return NewOutput(like, Shape{bytes > 0 ? bytes : 1}, DType::kBool);
}
// n int64s on `like`'s device and stream.
inline Tensor Int64Buffer(const Tensor& like, int64_t n) { return NewOutput(like, Shape{n}, DType::kInt64); }

// The bits needed for keys in [0, max_key].
inline int KeyBits(uint64_t max_key) {
  int bits = 1;
  while (bits < 64 && (max_key >> bits) != 0) ++bits;
  return bits;
}

// keys_out / values_out = keys_in / values_in (n of each) sorted by key ascending, equal
// keys in input order (LSD radix sort: stable). Keys in [0, max_key].
inline void StableSortPairs(const Tensor& like, const uint64_t* keys_in, uint64_t* keys_out, const int64_t* values_in,
                            int64_t* values_out, int64_t n, uint64_t max_key) {
  if (n <= 0) return;
  const cudaStream_t stream = StreamOf(like);
  const int end_bit = KeyBits(max_key);
  size_t bytes = 0;
  SPMD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, values_in, values_out, n, 0,
                                                  end_bit, stream));
  Tensor temp = Scratch(like, static_cast<int64_t>(bytes));
  SPMD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.bytes(), bytes, keys_in, keys_out, values_in, values_out, n,
                                                  0, end_bit, stream));
}

// The same per segment: `segments` runs of `len` keys each (segment s: [s * len, (s + 1) * len)).
template <typename Key>
inline void StableSortSegments(const Tensor& like, const Key* keys_in, Key* keys_out, const int64_t* values_in,
                               int64_t* values_out, int64_t segments, int64_t len) {
  if (segments <= 0 || len <= 0) return;
  const cudaStream_t stream = StreamOf(like);
  const int64_t n = segments * len;
  if (segments == 1) {  // one line: the plain radix sort
    size_t bytes = 0;
    SPMD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, values_in, values_out, n, 0,
                                                    static_cast<int>(sizeof(Key) * 8), stream));
    Tensor temp = Scratch(like, static_cast<int64_t>(bytes));
    SPMD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.bytes(), bytes, keys_in, keys_out, values_in, values_out,
                                                    n, 0, static_cast<int>(sizeof(Key) * 8), stream));
    return;
  }
  // Segment offsets as a strided counting sequence: begin s * len, end (s + 1) * len.
  Tensor offsets = Int64Buffer(like, segments + 1);
  FillOffsets(offsets, segments + 1, len, stream);
  const int64_t* begin = reinterpret_cast<const int64_t*>(offsets.bytes());
  size_t bytes = 0;
  SPMD_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, bytes, keys_in, keys_out, values_in, values_out,
                                                            n, segments, begin, begin + 1, stream));
  Tensor temp = Scratch(like, static_cast<int64_t>(bytes));
  SPMD_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp.bytes(), bytes, keys_in, keys_out, values_in,
                                                            values_out, n, segments, begin, begin + 1, stream));
}

}  // namespace spmd::kernels::cuda::detail
