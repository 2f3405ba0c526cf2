#include "kernels/cuda/cublas_handle.h"

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda.h"

namespace spmd::kernels::cuda {
namespace {

// The calling thread's handles, destroyed at thread exit (for the main thread: before the
// CUDA runtime's own teardown, which runs from exit handlers after thread-local objects).
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (auto& [device, handle] : handles_) {
      int previous = 0;
      if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
        (void)cublasDestroy(handle);
        (void)cudaSetDevice(previous);
      }
    }
  }
  cublasHandle_t Get(int device) {
    for (auto& [d, handle] : handles_) {
      if (d == device) return handle;
    }
    cublasHandle_t handle = nullptr;
    SPMD_CUBLAS_CHECK(cublasCreate(&handle));
    const cublasStatus_t mode = cublasSetMathMode(
        handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (mode != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(handle);
      ThrowCublas(mode, "cublasSetMathMode", __FILE__, __LINE__);
    }
    handles_.emplace_back(device, handle);
    return handle;
  }

 private:
  std::vector<std::pair<int, cublasHandle_t>> handles_;
};

}  // namespace

void ThrowCublas(cublasStatus_t status, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + ": " + cublasGetStatusName(status) + " (" +
                  cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

cublasHandle_t CublasHandle(int device, cudaStream_t stream) {
  thread_local ThreadHandles handles;
  cublasHandle_t handle = handles.Get(device);
  SPMD_CUBLAS_CHECK(cublasSetStream(handle, stream));
  return handle;
}

}  // namespace spmd::kernels::cuda
