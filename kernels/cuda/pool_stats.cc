#include "kernels/cuda/pool_stats.h"

#include <algorithm>

namespace spmd::kernels::cuda {

size_t PoolBlockSize(size_t nbytes) {
  if (nbytes == 0) return 0;
  return (nbytes + kPoolGranule - 1) / kPoolGranule * kPoolGranule;
}

void PoolStats::OnAllocate(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  usage_.bytes_in_use += static_cast<int64_t>(nbytes);
  usage_.peak_bytes = std::max(usage_.peak_bytes, usage_.bytes_in_use);
  ++usage_.live_blocks;
  ++usage_.total_allocations;
}

void PoolStats::OnFree(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t n = static_cast<int64_t>(nbytes);
  if (usage_.live_blocks == 0 || n > usage_.bytes_in_use) {
    ++mismatched_;
    usage_.bytes_in_use = std::max<int64_t>(0, usage_.bytes_in_use - n);
    usage_.live_blocks = std::max<int64_t>(0, usage_.live_blocks - 1);
    return;
  }
  usage_.bytes_in_use -= n;
  --usage_.live_blocks;
}

PoolUsage PoolStats::usage() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return usage_;
}

int64_t PoolStats::mismatched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mismatched_;
}

void PoolStats::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  usage_.peak_bytes = usage_.bytes_in_use;
}

}  // namespace spmd::kernels::cuda
