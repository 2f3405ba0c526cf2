#include "runtime/comm/cuda_staging.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace spmd::runtime {
namespace {

void Check(cudaError_t e, const char* what, size_t nbytes) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " of " + std::to_string(nbytes) + " bytes failed: " +
                             cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
}

class CudaStaging final : public HostStaging {
 public:
  void ToHost(void* host, const void* device, size_t nbytes, kernels::Stream stream) override {
    Copy(host, device, nbytes, cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync device -> host");
  }
  void ToDevice(void* device, const void* host, size_t nbytes, kernels::Stream stream) override {
    Copy(device, host, nbytes, cudaMemcpyHostToDevice, stream, "cudaMemcpyAsync host -> device");
  }

 private:
  static void Copy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, kernels::Stream stream,
                   const char* what) {
    if (nbytes == 0) return;
    const auto s = static_cast<cudaStream_t>(stream.handle);
    Check(cudaMemcpyAsync(dst, src, nbytes, kind, s), what, nbytes);
    // The host buffer is pageable and is read (or handed to MPI) as soon as this returns.
    Check(cudaStreamSynchronize(s), "cudaStreamSynchronize after a staging copy", nbytes);
  }
};

}  // namespace

HostStaging& CudaHostStaging() {
  static CudaStaging staging;
  return staging;
}

}  // namespace spmd::runtime
