#include "kernels/cpu/permute.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/internal.h"

namespace spmd::kernels::cpu::internal {
namespace {

constexpr int64_t kTile = 32;

// Copies a [rows, cols] block: dst[r * dst_rs + c] = src[r + c * src_cs] (dst rows are
// contiguous along c; src is contiguous along r), in tiles.
template <typename U>
void TransposeBlock(U* dst, const U* src, int64_t rows, int64_t cols, int64_t dst_rs,
                    int64_t src_cs) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        U* d = dst + r * dst_rs;
        const U* s = src + r;
        for (int64_t c = c0; c < c1; ++c) d[c] = s[c * src_cs];
      }
    }
  }
}

void TransposeBlockBytes(std::byte* dst, const std::byte* src, int64_t rows, int64_t cols,
                         int64_t dst_rs, int64_t src_cs, size_t size) {
  switch (size) {
    case 1:
      return TransposeBlock(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src),
                            rows, cols, dst_rs, src_cs);
    case 2:
      return TransposeBlock(reinterpret_cast<uint16_t*>(dst),
                            reinterpret_cast<const uint16_t*>(src), rows, cols, dst_rs, src_cs);
    case 4:
      return TransposeBlock(reinterpret_cast<uint32_t*>(dst),
                            reinterpret_cast<const uint32_t*>(src), rows, cols, dst_rs, src_cs);
    case 8:
      return TransposeBlock(reinterpret_cast<uint64_t*>(dst),
                            reinterpret_cast<const uint64_t*>(src), rows, cols, dst_rs, src_cs);
    default:
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          std::memcpy(dst + (r * dst_rs + c) * static_cast<int64_t>(size),
                      src + (r + c * src_cs) * static_cast<int64_t>(size), size);
        }
      }
  }
}

}  // namespace

void PermuteBytes(std::byte* dst, const std::byte* src, const Shape& in_shape,
                  const std::vector<int64_t>& perm, size_t element_size) {
  const int64_t numel = NumElements(in_shape);
  if (numel == 0) return;
  const int64_t rank = static_cast<int64_t>(in_shape.size());
  // Input strides, then the output's dims as (size, input stride), size-1 dims dropped and
  // neighbours merged where the input walks them contiguously too.
  Shape in_strides(in_shape.size(), 1);
  for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * in_shape[d + 1];
  Shape dims, strides;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t size = in_shape[perm[i]];
    const int64_t stride = in_strides[perm[i]];
    if (size == 1) continue;
    if (!dims.empty() && strides.back() == stride * size) {
      dims.back() *= size;
      strides.back() = stride;
    } else {
      dims.push_back(size);
      strides.push_back(stride);
    }
  }
  const int64_t es = static_cast<int64_t>(element_size);
  if (dims.empty() || (dims.size() == 1 && strides[0] == 1)) {
    std::memcpy(dst, src, static_cast<size_t>(numel * es));
    return;
  }
  const int64_t r = static_cast<int64_t>(dims.size());
  Shape out_strides(dims.size(), 1);
  for (int64_t d = r - 2; d >= 0; --d) out_strides[d] = out_strides[d + 1] * dims[d + 1];

  // Contiguous rows: the last output dim is contiguous in the input.
  if (strides[r - 1] == 1) {
    const int64_t len = dims[r - 1];
    const int64_t rows = numel / len;
    std::vector<int64_t> index(static_cast<size_t>(r), 0);
    int64_t in = 0;
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(dst + row * len * es, src + in * es, static_cast<size_t>(len * es));
      for (int64_t d = r - 2; d >= 0; --d) {
        in += strides[d];
        if (++index[d] < dims[d]) break;
        in -= strides[d] * dims[d];
        index[d] = 0;
      }
    }
    return;
  }

  // Otherwise some output dim q is the input's contiguous one: copy [dims[q], dims[last]]
  // blocks transposed, looping over the other dims.
  int64_t q = 0;
  for (int64_t d = 0; d < r; ++d) {
    if (strides[d] == 1) q = d;
  }
  std::vector<int64_t> others;
  for (int64_t d = 0; d < r - 1; ++d) {
    if (d != q) others.push_back(d);
  }
  int64_t blocks = 1;
  for (int64_t d : others) blocks *= dims[d];
  std::vector<int64_t> index(others.size(), 0);
  int64_t in = 0, out = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    TransposeBlockBytes(dst + out * es, src + in * es, dims[q], dims[r - 1], out_strides[q],
                        strides[r - 1], element_size);
    for (int64_t k = static_cast<int64_t>(others.size()) - 1; k >= 0; --k) {
      const int64_t d = others[k];
      in += strides[d];
      out += out_strides[d];
      if (++index[k] < dims[d]) break;
      in -= strides[d] * dims[d];
      out -= out_strides[d] * dims[d];
      index[k] = 0;
    }
  }
}

}  // namespace spmd::kernels::cpu::internal
