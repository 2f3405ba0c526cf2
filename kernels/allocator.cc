#include "kernels/allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace spmd::kernels {
namespace {

// The size class of a small request: 0 for up to 64 bytes, 1 for up to 128, ...
size_t SmallClass(size_t nbytes) {
  const size_t rounded = std::bit_ceil(nbytes < kTensorAlignment ? kTensorAlignment : nbytes);
  return static_cast<size_t>(std::countr_zero(rounded)) - static_cast<size_t>(std::countr_zero(kTensorAlignment));
}

size_t LimitFromEnvironment() {
  size_t limit = size_t{512} << 20;
  const char* env = std::getenv("SPMD_HOST_CACHE_MB");
  if (env != nullptr) {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && mb >= 0) limit = static_cast<size_t>(mb) << 20;
  }
  return limit;
}

bool HugePagesFromEnvironment() {
  const char* env = std::getenv("SPMD_HOST_HUGE_PAGES");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

CachingHostAllocator* TheHostAllocator() {
  // Never destroyed: tensors in other static objects may be freed after it would be.
  static CachingHostAllocator* allocator =
      new CachingHostAllocator(LimitFromEnvironment(), HugePagesFromEnvironment());
  return allocator;
}

// A block of `block` bytes (a multiple of 4 KiB) on a kHugeFrom boundary, mapped fresh
// and advised as huge pages before anything touches it (advice given to pages already
// faulted in as 4 KiB ones, as heap memory that malloc recycles, changes nothing until
// the kernel's background collapse). nullptr when the system has no memory for it.
void* MapHuge(size_t block) {
  constexpr size_t kHuge = CachingHostAllocator::kHugeFrom;
  const size_t span = block + kHuge;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) & ~uintptr_t{kHuge - 1};
  const size_t head = aligned - start, tail = span - head - block;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + block), tail);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), block, MADV_HUGEPAGE);  // advice: an error leaves 4 KiB pages
#endif
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

CachingHostAllocator::CachingHostAllocator(size_t limit_bytes, bool huge_pages) : huge_pages_(huge_pages) {
  stats_.limit_bytes = limit_bytes;
  // Room for the lists up front, so that a free never needs memory for its list entry
  // (a small list holds at most limit / class size entries; capped to keep this cheap).
  for (size_t c = 0; c < kSmallClasses; ++c) {
    const size_t most = limit_bytes / (kTensorAlignment << c);
    small_[c].reserve(most < 4096 ? most : 4096);
  }
}

CachingHostAllocator::~CachingHostAllocator() { Trim(); }

size_t CachingHostAllocator::BlockBytes(size_t nbytes) {
  if (nbytes < kLargeFrom) return kTensorAlignment << SmallClass(nbytes);
  return (nbytes + 4095) / 4096 * 4096;
}

void* CachingHostAllocator::Allocate(size_t nbytes, Stream) {
  if (nbytes == 0) return nullptr;
  const size_t block = BlockBytes(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<void*>* list = nullptr;
    if (nbytes < kLargeFrom) {
      list = &small_[SmallClass(nbytes)];
    } else {
      auto found = large_.find(block);
      if (found != large_.end()) list = &found->second;
    }
    if (list != nullptr && !list->empty()) {
      void* p = list->back();
      list->pop_back();
      stats_.cached_bytes -= block;
      --stats_.cached_blocks;
      ++stats_.hits;
      return p;
    }
    ++stats_.misses;
  }
  void* p = Huge(block) ? MapHuge(block) : std::aligned_alloc(kTensorAlignment, block);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void CachingHostAllocator::Deallocate(void* p, size_t nbytes, Stream) noexcept {
  if (p == nullptr) return;
  const size_t block = BlockBytes(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.cached_bytes + block <= stats_.limit_bytes) {
      try {
        std::vector<void*>& list = nbytes < kLargeFrom ? small_[SmallClass(nbytes)] : large_[block];
        list.push_back(p);
        stats_.cached_bytes += block;
        ++stats_.cached_blocks;
        return;
      } catch (...) {  // no memory for the list entry: give the buffer back instead
      }
    }
    ++stats_.releases;
  }
  Release(p, block);
}

void CachingHostAllocator::Release(void* p, size_t block) const noexcept {
  if (Huge(block)) {
    munmap(p, block);
  } else {
    std::free(p);
  }
}

HostCacheStats CachingHostAllocator::Stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingHostAllocator::Trim() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::vector<void*>& list : small_) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  for (auto& [block, list] : large_) {
    for (void* p : list) Release(p, block);
  }
  large_.clear();
  stats_.cached_bytes = 0;
  stats_.cached_blocks = 0;
}

Allocator& HostAllocator() { return *TheHostAllocator(); }

HostCacheStats HostAllocatorStats() { return TheHostAllocator()->Stats(); }

}  // namespace spmd::kernels
