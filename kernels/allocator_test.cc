// The caching host allocator (kernels/allocator.h): reuse within a size class, alignment,
// the bound on cached bytes over generated allocate/free sequences, the off switch (limit 0,
// and SPMD_HOST_CACHE_MB=0 for the shared one: the ctest entry allocator_cache_off), and
// concurrent use (threads that each own their buffers and check nobody else wrote them).
#include "kernels/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/tensor.h"

namespace spmd::kernels {
namespace {

TEST(CachingHostAllocator, ReusesAFreedBufferOfTheSameClass) {
  CachingHostAllocator a(size_t{1} << 20);
  void* p = a.Allocate(100, Stream{});
  a.Deallocate(p, 100, Stream{});
  EXPECT_EQ(a.Stats().cached_bytes, 128u);
  void* q = a.Allocate(128, Stream{});  // the 128-byte class too
  EXPECT_EQ(q, p);
  void* r = a.Allocate(100, Stream{});  // the cached one is taken: a new one
  EXPECT_NE(r, p);
  a.Deallocate(q, 128, Stream{});
  a.Deallocate(r, 100, Stream{});
  // Large: rounded to 4 KiB.
  void* big = a.Allocate(70000, Stream{});
  a.Deallocate(big, 70000, Stream{});
  EXPECT_EQ(a.Allocate(70000 + 500, Stream{}), big);
  a.Deallocate(big, 70500, Stream{});
  const HostCacheStats s = a.Stats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 3);
  EXPECT_EQ(s.cached_blocks, 3u);
  EXPECT_EQ(s.cached_bytes, 128u + 128u + 73728u);
  EXPECT_EQ(a.Allocate(0, Stream{}), nullptr);
}

TEST(CachingHostAllocator, BlocksAreAlignedAndWholeForEverySize) {
  CachingHostAllocator a(size_t{1} << 20);
  for (size_t n = 1; n < 70000; n = n * 3 / 2 + 1) {
    void* p = a.Allocate(n, Stream{});
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % kTensorAlignment, 0u) << n;
    ASSERT_GE(CachingHostAllocator::BlockBytes(n), n);
    std::memset(p, 0xab, CachingHostAllocator::BlockBytes(n));  // the whole block is ours
    a.Deallocate(p, n, Stream{});
  }
}

// With huge pages, a block of kHugeFrom bytes or more starts on a huge-page boundary (the
// kernel can back it with whole huge pages), smaller ones keep the tensor alignment, and
// both are reused as before.
TEST(CachingHostAllocator, LargeBlocksStartOnAHugePageWhenAsked) {
  constexpr size_t kHuge = CachingHostAllocator::kHugeFrom;
  CachingHostAllocator a(size_t{64} << 20, /*huge_pages=*/true);
  for (const size_t n : {kHuge - 4096, kHuge - 1, kHuge, kHuge + 1, 3 * kHuge + 12345}) {
    void* p = a.Allocate(n, Stream{});
    const size_t block = CachingHostAllocator::BlockBytes(n);
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    if (block >= kHuge) {
      ASSERT_EQ(at % kHuge, 0u) << n;
    } else {
      ASSERT_EQ(at % kTensorAlignment, 0u) << n;
    }
    std::memset(p, 0x5a, block);  // the whole block is ours
    a.Deallocate(p, n, Stream{});
    void* again = a.Allocate(n, Stream{});
    EXPECT_EQ(again, p) << n;
    a.Deallocate(again, n, Stream{});
  }
}

// The shared allocator takes huge pages for large blocks unless SPMD_HOST_HUGE_PAGES=0.
TEST(HostAllocator, LargeTensorsStartOnAHugePageByDefault) {
  const char* env = std::getenv("SPMD_HOST_HUGE_PAGES");
  if (env != nullptr && std::string(env) == "0") GTEST_SKIP() << "SPMD_HOST_HUGE_PAGES=0";
  const Tensor t = Tensor::Uninitialized({int64_t{1} << 20}, DType::kFloat32);  // 4 MiB
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes()) % CachingHostAllocator::kHugeFrom, 0u);
}

// Random allocate / free sequences under small limits: the cache never holds more than
// its limit, and its count and bytes are those of the buffers freed and not handed out.
TEST(CachingHostAllocator, CachedBytesStayWithinTheLimit) {
  std::mt19937 rng(11);
  for (size_t limit : {size_t{0}, size_t{1000}, size_t{4096}, size_t{200000}}) {
    CachingHostAllocator a(limit);
    std::vector<std::pair<void*, size_t>> live;
    int64_t allocations = 0;
    for (int step = 0; step < 3000; ++step) {
      if (live.empty() || rng() % 2 == 0) {
        const size_t n = rng() % 4 == 0 ? 65536 + rng() % 20000 : 1 + rng() % 3000;
        live.emplace_back(a.Allocate(n, Stream{}), n);
        ++allocations;
      } else {
        const size_t i = rng() % live.size();
        a.Deallocate(live[i].first, live[i].second, Stream{});
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      const HostCacheStats s = a.Stats();
      ASSERT_LE(s.cached_bytes, limit) << "limit " << limit << " step " << step;
      ASSERT_EQ(s.hits + s.misses, allocations);
    }
    for (auto& [p, n] : live) a.Deallocate(p, n, Stream{});
    if (limit == 0) {
      EXPECT_EQ(a.Stats().hits, 0);
      EXPECT_EQ(a.Stats().cached_blocks, 0u);
    } else {
      EXPECT_GT(a.Stats().hits, 0);
      EXPECT_GT(a.Stats().releases, 0);  // every limit here is too small to keep them all
    }
    a.Trim();
    EXPECT_EQ(a.Stats().cached_bytes, 0u);
    EXPECT_EQ(a.Stats().cached_blocks, 0u);
  }
}

// Threads allocate, fill with their own pattern, check it and free, on one allocator: a
// buffer handed to two owners at once, or a list corrupted by a race, breaks a pattern.
TEST(CachingHostAllocator, ConcurrentUseHandsEachBufferToOneOwner) {
  CachingHostAllocator a(size_t{256} << 10);
  constexpr int kThreads = 4;
  constexpr int kSteps = 4000;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<std::pair<uint32_t*, size_t>> mine;
      for (int step = 0; step < kSteps; ++step) {
        if (mine.size() < 8 && (mine.empty() || rng() % 2 == 0)) {
          const size_t count = 1 + rng() % (rng() % 8 == 0 ? 20000 : 500);
          auto* p = static_cast<uint32_t*>(a.Allocate(count * 4, Stream{}));
          for (size_t i = 0; i < count; ++i) p[i] = static_cast<uint32_t>(t * 1000003 + i);
          mine.emplace_back(p, count);
        } else {
          const size_t k = rng() % mine.size();
          auto [p, count] = mine[k];
          for (size_t i = 0; i < count; ++i) bad[t] += p[i] != static_cast<uint32_t>(t * 1000003 + i);
          a.Deallocate(p, count * 4, Stream{});
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (auto [p, count] : mine) a.Deallocate(p, count * 4, Stream{});
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  const HostCacheStats s = a.Stats();
  EXPECT_LE(s.cached_bytes, size_t{256} << 10);
  EXPECT_GT(s.hits, 0);
}

// The shared allocator follows SPMD_HOST_CACHE_MB; run by ctest with it 0
// (allocator_cache_off) and without (the default 512 MiB).
TEST(HostAllocator, FollowsTheEnvironmentLimit) {
  const char* env = std::getenv("SPMD_HOST_CACHE_MB");
  const size_t want = env != nullptr && std::string(env) == "0" ? 0 : size_t{512} << 20;
  if (env != nullptr && std::string(env) != "0") GTEST_SKIP() << "SPMD_HOST_CACHE_MB=" << env;
  EXPECT_EQ(HostAllocatorStats().limit_bytes, want);
  const int64_t hits = HostAllocatorStats().hits;
  { Tensor t = Tensor::Uninitialized({10}, DType::kFloat32); }
  { Tensor t = Tensor::Uninitialized({10}, DType::kFloat32); }
  if (want == 0) {
    EXPECT_EQ(HostAllocatorStats().hits, hits);
    EXPECT_EQ(HostAllocatorStats().cached_bytes, 0u);
  } else {
    EXPECT_GT(HostAllocatorStats().hits, hits);
  }
}

}  // namespace
}  // namespace spmd::kernels
