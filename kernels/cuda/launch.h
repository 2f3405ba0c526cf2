// Launch configuration of the CUDA kernels: plain C++ arithmetic, so it is tested on the
// CPU (kernels/cuda/launch_test.cc) and shared by every family.
#pragma once

#include <cstdint>

namespace spmd::kernels::cuda {

struct LaunchConfig {
  unsigned grid = 0;   // blocks; 0 means there is nothing to launch
  unsigned block = 0;  // threads per block
};

// The blocks of `block` threads (a multiple of 32, at most 1024) for a grid-stride loop
// over `n` elements: enough blocks to cover n once, capped at `max_blocks` (the loop
// strides over the rest). n <= 0 gives grid 0.
LaunchConfig GridStride(int64_t n, unsigned block = 256, unsigned max_blocks = 4096);

// One block per row for `rows` rows (the row kernels: softmax, norms), capped at the
// largest grid CUDA takes in x (2^31 - 1); the kernel strides over rows beyond it.
// `block` threads per row: the warp-multiple that covers `cols` once, between 32 and 1024.
LaunchConfig RowsConfig(int64_t rows, int64_t cols);

}  // namespace spmd::kernels::cuda
