// The CUDA pool's bookkeeping (kernels/cuda/pool_stats.h), against a model: random
// sequences of allocations and frees.
#include "kernels/cuda/pool_stats.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/allocator.h"

namespace spmd::kernels::cuda {
namespace {

TEST(PoolBlockSize, RoundsUpToTheGranule) {
  EXPECT_EQ(PoolBlockSize(0), 0u);
  EXPECT_EQ(PoolBlockSize(1), 256u);
  EXPECT_EQ(PoolBlockSize(256), 256u);
  EXPECT_EQ(PoolBlockSize(257), 512u);
  static_assert(kPoolGranule % kTensorAlignment == 0, "blocks keep the tensor alignment");
}

RC_GTEST_PROP(PoolBlockSize, SmallestGranuleMultipleAtLeastTheRequest, ()) {
  const size_t n = *rc::gen::inRange<size_t>(1, size_t{1} << 40);
  const size_t b = PoolBlockSize(n);
  RC_ASSERT(b % kPoolGranule == 0u);
  RC_ASSERT(b >= n);
  RC_ASSERT(b - n < kPoolGranule);
}

RC_GTEST_PROP(PoolStats, MatchesAModelOfLiveBlocks, ()) {
  PoolStats stats;
  std::vector<size_t> live;
  int64_t peak = 0, total = 0;
  const int steps = *rc::gen::inRange(0, 200);
  for (int s = 0; s < steps; ++s) {
    const bool allocate = live.empty() || *rc::gen::inRange(0, 3) != 0;
    if (allocate) {
      const size_t size = PoolBlockSize(*rc::gen::inRange<size_t>(1, 1 << 20));
      stats.OnAllocate(size);
      live.push_back(size);
      ++total;
    } else {
      const size_t at = *rc::gen::inRange<size_t>(0, live.size());
      stats.OnFree(live[at]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    }
    int64_t in_use = 0;
    for (size_t b : live) in_use += static_cast<int64_t>(b);
    peak = std::max(peak, in_use);
    const PoolUsage u = stats.usage();
    RC_ASSERT(u.bytes_in_use == in_use);
    RC_ASSERT(u.live_blocks == static_cast<int64_t>(live.size()));
    RC_ASSERT(u.peak_bytes == peak);
    RC_ASSERT(u.total_allocations == total);
  }
  RC_ASSERT(stats.mismatched() == 0);
  stats.ResetPeak();
  RC_ASSERT(stats.usage().peak_bytes == stats.usage().bytes_in_use);
}

TEST(PoolStats, AFreeWithoutAllocationIsCountedNotNegative) {
  PoolStats stats;
  stats.OnFree(256);
  EXPECT_EQ(stats.mismatched(), 1);
  EXPECT_EQ(stats.usage().bytes_in_use, 0);
  EXPECT_EQ(stats.usage().live_blocks, 0);
  stats.OnAllocate(256);
  stats.OnFree(512);  // more than is in use
  EXPECT_EQ(stats.mismatched(), 2);
  EXPECT_EQ(stats.usage().bytes_in_use, 0);
}

TEST(PoolStats, ThreadsAllocatingAndFreeingBalance) {
  PoolStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stats, t] {
      for (int i = 0; i < 2000; ++i) {
        const size_t size = PoolBlockSize(static_cast<size_t>(1 + (i * 37 + t) % 5000));
        stats.OnAllocate(size);
        stats.OnFree(size);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const PoolUsage u = stats.usage();
  EXPECT_EQ(u.bytes_in_use, 0);
  EXPECT_EQ(u.live_blocks, 0);
  EXPECT_EQ(u.total_allocations, 8000);
  EXPECT_GT(u.peak_bytes, 0);
  EXPECT_EQ(stats.mismatched(), 0);
}

}  // namespace
}  // namespace spmd::kernels::cuda
