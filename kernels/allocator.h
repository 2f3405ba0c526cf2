// Allocator: where a Tensor's bytes come from.
//
// The interface is stream-ordered in shape so that a CUDA stream-ordered pool
// (cudaMallocAsync / cudaFreeAsync) plugs in behind it: memory returned by Allocate(n, s)
// may be used by work ordered on s after the call; Deallocate(p, n, s) frees it once the
// work ordered on s before the call has completed (the caller need not synchronize). The
// host allocator ignores the stream: host work completes before its call returns.
//
// Allocators live as long as the process (Tensors keep a plain pointer to theirs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/device.h"

namespace spmd::kernels {

// Every allocator returns blocks aligned to at least this many bytes (vector loads, and
// what the CPU kernels have always been given).
inline constexpr size_t kTensorAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  // The device whose memory this allocator hands out.
  virtual Device device() const = 0;
  // Returns `nbytes` bytes aligned to kTensorAlignment, usable by work ordered on `stream`;
  // nullptr for 0 bytes. Throws std::bad_alloc when the memory is not there.
  virtual void* Allocate(size_t nbytes, Stream stream) = 0;
  // Frees `p` (from Allocate(nbytes, ...) of this allocator; nullptr is ignored) once the
  // work ordered on `stream` before this call has completed.
  virtual void Deallocate(void* p, size_t nbytes, Stream stream) noexcept = 0;
};

// What a caching host allocator has done since it was made.
struct HostCacheStats {
  int64_t hits = 0;           // allocations served from the cache
  int64_t misses = 0;         // allocations that went to aligned_alloc
  int64_t releases = 0;       // frees that went to the system (cache off, full, or no room)
  size_t cached_bytes = 0;    // bytes held for reuse now (<= limit_bytes)
  size_t cached_blocks = 0;   // buffers held for reuse now
  size_t limit_bytes = 0;     // the bound on cached_bytes
};

// Host memory, 64-byte aligned, with freed buffers kept for reuse: an eager training step
// frees and allocates the same tensors every step, and handing them to malloc and back
// costs its bookkeeping (small ones) or page faults and page clears (large ones).
// - Small buffers (under 64 KiB) in size classes: the powers of two from 64 bytes to
//   64 KiB, one free list each; a buffer takes the whole class size.
// - Large ones (64 KiB and more) rounded up to 4 KiB and reused for the same rounded size.
// The buffers held for reuse never exceed `limit_bytes` in all; past that a freed buffer
// goes back to the system; limit 0 turns the cache off (every call is aligned_alloc /
// free). Thread-safe (one mutex: host tensors are made and freed by the rank threads).
// With `huge_pages`, a block of kHugeFrom bytes or more is mapped on its own (mmap),
// aligned to kHugeFrom and advised to the kernel as transparent-huge-page memory before
// its first touch (madvise MADV_HUGEPAGE, what Linux's default THP mode "madvise" waits
// for): a copy between ranks through shared memory (Open MPI's CMA single copy) pins and
// walks 512x fewer pages; most 64 MiB reshards took half the time or less
// (docs/BENCHMARKS.md). Advice only: where the kernel has no huge pages the block is an
// ordinary one.
class CachingHostAllocator final : public Allocator {
 public:
  explicit CachingHostAllocator(size_t limit_bytes, bool huge_pages = false);
  ~CachingHostAllocator() override;  // frees what it holds
  CachingHostAllocator(const CachingHostAllocator&) = delete;
  CachingHostAllocator& operator=(const CachingHostAllocator&) = delete;

  Device device() const override { return Device::Host(); }
  void* Allocate(size_t nbytes, Stream stream) override;
  void Deallocate(void* p, size_t nbytes, Stream stream) noexcept override;

  HostCacheStats Stats() const;
  // Gives every held buffer back to the system.
  void Trim() noexcept;

  // The bytes a request of `nbytes` takes (its class size, or rounded to 4 KiB).
  static size_t BlockBytes(size_t nbytes);
  static constexpr size_t kSmallClasses = 11;  // 64 B .. 64 KiB
  static constexpr size_t kLargeFrom = size_t{64} << 10;
  static constexpr size_t kHugeFrom = size_t{2} << 20;  // one x86-64 huge page
  bool huge_pages() const { return huge_pages_; }

 private:
  mutable std::mutex mutex_;
  std::vector<void*> small_[kSmallClasses];
  std::map<size_t, std::vector<void*>> large_;
  HostCacheStats stats_;
  bool huge_pages_ = false;

  // Whether a block of `block` bytes is mapped as huge pages (and unmapped, not freed).
  bool Huge(size_t block) const { return huge_pages_ && block >= kHugeFrom; }
  void Release(void* p, size_t block) const noexcept;  // back to the system
};

// The host allocator shared by every host tensor: a CachingHostAllocator bounded by
// SPMD_HOST_CACHE_MB MiB (default 512; 0 turns the cache off), with huge pages for large
// blocks unless SPMD_HOST_HUGE_PAGES=0.
Allocator& HostAllocator();
// Its statistics (for benchmarks and tests).
HostCacheStats HostAllocatorStats();

}  // namespace spmd::kernels
