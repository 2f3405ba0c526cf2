#include "kernels/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace spmd::kernels {
namespace {

// Host memory, 64-byte aligned. Buffers of 64 KiB and more are cached when freed and
// handed out again for the same rounded size: an eager training step frees and allocates
// the same large activations every step, and returning them to the system each time
// costs a page fault and a page clear per 4 KiB on the next use. The cache holds at most
// SPMD_HOST_CACHE_MB MiB (default 512; 0 turns it off); past that, freed buffers go back
// to the system. Smaller buffers go straight to malloc, which caches them itself.
class HostAllocatorImpl final : public Allocator {
 public:
  HostAllocatorImpl() {
    const char* env = std::getenv("SPMD_HOST_CACHE_MB");
    if (env != nullptr) {
      char* end = nullptr;
      const long long mb = std::strtoll(env, &end, 10);
      if (end != env && *end == '\0' && mb >= 0) limit_ = static_cast<size_t>(mb) << 20;
    }
  }
  Device device() const override { return Device::Host(); }

  void* Allocate(size_t nbytes, Stream) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = Rounded(nbytes);
    if (rounded >= kCachedFrom) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = free_.find(rounded);
      if (found != free_.end() && !found->second.empty()) {
        void* p = found->second.back();
        found->second.pop_back();
        cached_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(kTensorAlignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }

  void Deallocate(void* p, size_t nbytes, Stream) noexcept override {
    if (p == nullptr) return;
    const size_t rounded = Rounded(nbytes);
    if (rounded >= kCachedFrom) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + rounded <= limit_) {
        try {
          free_[rounded].push_back(p);
          cached_ += rounded;
          return;
        } catch (...) {  // no memory for the list: give the buffer back instead
        }
      }
    }
    std::free(p);
  }

 private:
  static constexpr size_t kCachedFrom = size_t{64} << 10;
  static size_t Rounded(size_t nbytes) {
    const size_t unit = nbytes >= kCachedFrom ? 4096 : kTensorAlignment;
    return (nbytes + unit - 1) / unit * unit;
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = size_t{512} << 20;
};

}  // namespace

Allocator& HostAllocator() {
  // Never destroyed: tensors in other static objects may be freed after it would be.
  static HostAllocatorImpl* allocator = new HostAllocatorImpl;
  return *allocator;
}

}  // namespace spmd::kernels
