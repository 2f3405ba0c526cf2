#include "kernels/cuda/launch.h"

#include <algorithm>

namespace spmd::kernels::cuda {

LaunchConfig GridStride(int64_t n, unsigned block, unsigned max_blocks) {
  if (n <= 0) return {0, block};
  const int64_t blocks = (n + block - 1) / block;
  return {static_cast<unsigned>(std::min<int64_t>(blocks, max_blocks)), block};
}

LaunchConfig RowsConfig(int64_t rows, int64_t cols) {
  if (rows <= 0) return {0, 32};
  int64_t block = ((std::max<int64_t>(cols, 1) + 31) / 32) * 32;
  block = std::clamp<int64_t>(block, 32, 1024);
  const int64_t grid = std::min<int64_t>(rows, 2147483647);
  return {static_cast<unsigned>(grid), static_cast<unsigned>(block)};
}

}  // namespace spmd::kernels::cuda
