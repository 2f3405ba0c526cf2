// One Allocator per CUDA device over the device's default memory pool (stream-ordered:
// cudaMallocFromPoolAsync / cudaFreeAsync). The pool's release threshold is raised to the
// maximum, so freed blocks stay cached in the pool for the next allocation instead of going
// back to the driver at each synchronization: after the first training step, allocation is
// a sub-allocation from memory the pool already holds, with no cudaMalloc and no implicit
// synchronization. Sizes are rounded up to 256 bytes (PoolBlockSize).
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "kernels/backend_checks.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pool_stats.h"

namespace spmd::kernels::cuda {
namespace {

class CudaPoolAllocator final : public Allocator {
 public:
  explicit CudaPoolAllocator(int device) : device_(device) {
    DeviceGuard guard(device_);
    SPMD_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device_));
    uint64_t threshold = std::numeric_limits<uint64_t>::max();
    SPMD_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  }

  Device device() const override { return Device::Cuda(device_); }

  void* Allocate(size_t nbytes, Stream stream) override {
    if (nbytes == 0) return nullptr;
    const size_t size = PoolBlockSize(nbytes);
    DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t error = cudaMallocFromPoolAsync(&p, size, pool_, ToCuda(stream));
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw std::bad_alloc();
    }
    if (error != cudaSuccess) ThrowCuda(error, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
    if (reinterpret_cast<uintptr_t>(p) % kTensorAlignment != 0) {
      (void)cudaFreeAsync(p, ToCuda(stream));
      throw CudaError("cudaMallocFromPoolAsync returned " + std::to_string(reinterpret_cast<uintptr_t>(p)) +
                      ", not aligned to " + std::to_string(kTensorAlignment) + " bytes");
    }
    stats_.OnAllocate(size);
    return p;
  }

  void Deallocate(void* p, size_t nbytes, Stream stream) noexcept override {
    if (p == nullptr) return;
    int previous = -1;
    const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                               cudaSetDevice(device_) == cudaSuccess;
    // At process exit the runtime may be gone already (cudaErrorCudartUnloading): the
    // memory goes with it, and there is nothing to report from a destructor.
    (void)cudaFreeAsync(p, ToCuda(stream));
    if (switch_device) (void)cudaSetDevice(previous);
    stats_.OnFree(PoolBlockSize(nbytes));
  }

  PoolUsage usage() const { return stats_.usage(); }
  void ResetPeak() { stats_.ResetPeak(); }

  void Trim() {
    DeviceGuard guard(device_);
    SPMD_CUDA_CHECK(cudaDeviceSynchronize());
    SPMD_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
  }

 private:
  int device_;
  cudaMemPool_t pool_ = nullptr;
  PoolStats stats_;
};

CudaPoolAllocator& PoolOf(int index) {
  static std::mutex mutex;
  static std::vector<CudaPoolAllocator*>* pools = new std::vector<CudaPoolAllocator*>;  // never freed
  std::lock_guard<std::mutex> lock(mutex);
  std::string why;
  const int count = DeviceCount(&why);
  checks::CheckDeviceIndex(Device::Cuda(index), DeviceKind::kCuda, count, "device", why);
  if (pools->size() < static_cast<size_t>(count)) pools->resize(count, nullptr);
  if ((*pools)[index] == nullptr) (*pools)[index] = new CudaPoolAllocator(index);
  return *(*pools)[index];
}

// The pool of `device`; InvalidArgument ("device") when it is not a CUDA device of this
// process.
CudaPoolAllocator& PoolOfDevice(Device device, const char* what) {
  checks::CheckDeviceKind(device, DeviceKind::kCuda, "device", what);
  return PoolOf(device.index);
}

}  // namespace

Allocator& CudaAllocatorFor(int index) { return PoolOf(index); }

PoolUsage MemoryUsage(Device device) { return PoolOfDevice(device, "MemoryUsage").usage(); }

void ResetPeakMemory(Device device) { PoolOfDevice(device, "ResetPeakMemory").ResetPeak(); }

void ReleaseCachedMemory(Device device) { PoolOfDevice(device, "ReleaseCachedMemory").Trim(); }

}  // namespace spmd::kernels::cuda
