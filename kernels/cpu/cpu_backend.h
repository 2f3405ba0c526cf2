// CpuBackend: the Backend of host memory, over the CPU kernels of kernels/cpu.
//
// Every call runs on the calling thread and completes before it returns (the host's one
// stream, the null handle), so Synchronize waits for nothing. Stateless: one instance
// serves every thread.
#pragma once

#include "kernels/backend.h"

namespace spmd::kernels {

class CpuBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::kHost; }
  // InvalidArgument ("device") for a device that is not the host.
  Allocator& AllocatorFor(Device device) override;
  Tensors RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) override;
  void Copy(void* dst, const void* src, size_t nbytes, Stream stream) override;
  void CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) override;
  void CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) override;
  void CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
               const std::vector<int64_t>& src_at, std::byte* dst,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
               const std::vector<int64_t>& extent, size_t element_size, Stream stream) override;
  void Fill(void* dst, int64_t count, DType dtype, double value, Stream stream) override;
  void Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide,
             Stream stream) override;
  void Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op,
              Stream stream) override;
  void ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream stream) override;
  void Synchronize(Stream) override {}
};

}  // namespace spmd::kernels
