// cuBLAS handles for the contractions: one per (host thread, device), created on first use
// and destroyed when the thread ends; set to the caller's stream on every call. Included by
// kernels/cuda/*.cu only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace spmd::kernels::cuda {

// The calling thread's handle for `device` (which must be current), bound to `stream`.
// Math mode: no TF32 and no reduced-precision split-K reductions, so that float32 stays
// float32 and the 2-byte types accumulate in float32 as the CPU kernels do.
// Throws CudaError naming the cuBLAS call that failed.
cublasHandle_t CublasHandle(int device, cudaStream_t stream);

// Throws CudaError naming `call`, cuBLAS's status name and file:line.
[[noreturn]] void ThrowCublas(cublasStatus_t status, const char* call, const char* file, int line);

#define SPMD_CUBLAS_CHECK(call)                                                   \
  do {                                                                            \
    const cublasStatus_t spmd_cublas_status_ = (call);                            \
    if (spmd_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                           \
      ::spmd::kernels::cuda::ThrowCublas(spmd_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                             \
  } while (0)

}  // namespace spmd::kernels::cuda
