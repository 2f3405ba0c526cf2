#include "kernels/allocator.h"

#include <cstdlib>
#include <new>

namespace spmd::kernels {
namespace {

class HostAllocatorImpl final : public Allocator {
 public:
  Device device() const override { return Device::Host(); }
  void* Allocate(size_t nbytes, Stream) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    void* p = std::aligned_alloc(kTensorAlignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void Deallocate(void* p, size_t, Stream) noexcept override { std::free(p); }
};

}  // namespace

Allocator& HostAllocator() {
  static HostAllocatorImpl allocator;
  return allocator;
}

}  // namespace spmd::kernels
