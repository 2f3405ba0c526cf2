// Launch configuration (kernels/cuda/launch.h): what every family's grid comes from.
#include "kernels/cuda/launch.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>

namespace spmd::kernels::cuda {
namespace {

RC_GTEST_PROP(GridStride, CoversEveryElementOnceOrCapsTheGrid, ()) {
  const int64_t n = *rc::gen::oneOf(rc::gen::inRange<int64_t>(-5, 5000),
                                    rc::gen::inRange<int64_t>(0, int64_t{1} << 40));
  const unsigned block = 32 * *rc::gen::inRange<unsigned>(1, 33);  // 32 .. 1024
  const unsigned max_blocks = *rc::gen::inRange<unsigned>(1, 70000);
  const LaunchConfig c = GridStride(n, block, max_blocks);
  RC_ASSERT(c.block == block);
  if (n <= 0) {
    RC_ASSERT(c.grid == 0u);
    return;
  }
  RC_ASSERT(c.grid >= 1u);
  RC_ASSERT(c.grid <= max_blocks);
  const int64_t threads = static_cast<int64_t>(c.grid) * block;
  // Either one pass covers n (and one block fewer would not), or the grid is at its cap.
  if (c.grid < max_blocks) {
    RC_ASSERT(threads >= n);
    RC_ASSERT(threads - block < n);
  } else {
    RC_ASSERT(static_cast<int64_t>(max_blocks) * block <= (n + block - 1) / block * block);
  }
}

TEST(GridStride, Defaults) {
  EXPECT_EQ(GridStride(1).grid, 1u);
  EXPECT_EQ(GridStride(1).block, 256u);
  EXPECT_EQ(GridStride(256).grid, 1u);
  EXPECT_EQ(GridStride(257).grid, 2u);
  EXPECT_EQ(GridStride(int64_t{1} << 40).grid, 4096u);
  EXPECT_EQ(GridStride(0).grid, 0u);
}

RC_GTEST_PROP(RowsConfig, OneBlockPerRowWarpMultipleThreads, ()) {
  const int64_t rows = *rc::gen::oneOf(rc::gen::inRange<int64_t>(-3, 100000),
                                       rc::gen::inRange<int64_t>(0, int64_t{1} << 40));
  const int64_t cols = *rc::gen::oneOf(rc::gen::inRange<int64_t>(-3, 3000),
                                       rc::gen::inRange<int64_t>(0, int64_t{1} << 40));
  const LaunchConfig c = RowsConfig(rows, cols);
  RC_ASSERT(c.block % 32 == 0u);
  RC_ASSERT(c.block >= 32u);
  RC_ASSERT(c.block <= 1024u);
  if (rows <= 0) {
    RC_ASSERT(c.grid == 0u);
    return;
  }
  RC_ASSERT(static_cast<int64_t>(c.grid) == std::min<int64_t>(rows, 2147483647));
  if (cols > 0 && cols <= 1024) {
    RC_ASSERT(static_cast<int64_t>(c.block) >= cols);
    RC_ASSERT(static_cast<int64_t>(c.block) - 32 < cols);
  }
  if (cols > 1024) RC_ASSERT(c.block == 1024u);
}

}  // namespace
}  // namespace spmd::kernels::cuda
