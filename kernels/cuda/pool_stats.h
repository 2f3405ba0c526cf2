// Bookkeeping of one device's stream-ordered pool: bytes handed out and not yet freed, the
// peak of that figure, and the number of live blocks. Plain C++ (tested on the CPU); the
// CUDA allocator (kernels/cuda/allocator.cu) calls it around cudaMallocFromPoolAsync /
// cudaFreeAsync. A block counts as freed when Deallocate is called (the pool reuses it once
// the work ordered before the free has run). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace spmd::kernels::cuda {

// What a pool has handed out (kernels/cuda/cuda.h: MemoryUsage).
struct PoolUsage {
  int64_t bytes_in_use = 0;  // rounded sizes of the live blocks
  int64_t peak_bytes = 0;    // the largest bytes_in_use since the start (or ResetPeak)
  int64_t live_blocks = 0;
  int64_t total_allocations = 0;  // Allocate calls that handed out a block
};

// The size a request of `nbytes` takes from the pool: a multiple of kPoolGranule (so every
// block starts on a kPoolGranule boundary when the pool hands out its granules in order,
// and tail loads of a vector kernel stay inside the block). 0 stays 0.
inline constexpr size_t kPoolGranule = 256;
size_t PoolBlockSize(size_t nbytes);

class PoolStats {
 public:
  // A block of `nbytes` (already PoolBlockSize-rounded) handed out / freed.
  void OnAllocate(size_t nbytes);
  // Freeing more than is in use (a double free, or a block from elsewhere) is a programming
  // error: the counts saturate at zero rather than going negative, and `mismatched()`
  // counts such calls.
  void OnFree(size_t nbytes);
  PoolUsage usage() const;
  int64_t mismatched() const;
  // Sets the peak to the bytes in use now.
  void ResetPeak();

 private:
  mutable std::mutex mutex_;
  PoolUsage usage_;
  int64_t mismatched_ = 0;
};

}  // namespace spmd::kernels::cuda
