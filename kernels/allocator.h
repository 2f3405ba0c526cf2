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

// The host allocator (aligned_alloc / free; freed buffers of 64 KiB and more are cached
// for reuse, up to SPMD_HOST_CACHE_MB MiB, default 512), shared by every host tensor.
Allocator& HostAllocator();

}  // namespace spmd::kernels
