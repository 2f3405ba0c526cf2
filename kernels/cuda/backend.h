// CudaBackend: the Backend (kernels/backend.h) of CUDA devices. Plain C++ declarations;
// kernels/cuda/backend.cu. EnableCuda (cuda.h) registers one instance.
//
// Every call enqueues its work on the given stream (a stream of the buffer's device;
// Stream{} is the legacy default stream of that device) and returns without waiting, as
// the ordering contract of backend.h allows; Synchronize waits. The device a raw-pointer
// call runs on is the one its buffer lives on (cudaPointerGetAttributes); a buffer that is
// not CUDA device memory is InvalidArgument naming the parameter.
#pragma once

#include "kernels/backend.h"

namespace spmd::kernels::cuda {

class CudaBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  // The device's stream-ordered pool; InvalidArgument ("device") for a device that is not
  // a usable CUDA device.
  Allocator& AllocatorFor(Device device) override;
  // RunCudaKernel (kernels/cuda/registry.h): inputs on one CUDA device.
  Tensors RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) override;
  void Copy(void* dst, const void* src, size_t nbytes, Stream stream) override;
  void CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) override;
  void CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) override;
  void CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
               const std::vector<int64_t>& src_at, std::byte* dst,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
               const std::vector<int64_t>& extent, size_t element_size, Stream stream) override;
  void Fill(void* dst, int64_t count, DType dtype, double value, Stream stream) override;
  void Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide, Stream stream) override;
  void Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op,
              Stream stream) override;
  void ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream stream) override;
  void Synchronize(Stream stream) override;
};

}  // namespace spmd::kernels::cuda
