// What every CUDA kernel file shares: error checks, streams, output allocation, dtype
// dispatch and 2-byte loads and stores. Included by kernels/cuda/*.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/launch.h"
#include "kernels/tensor.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"
#include "rules/model/half.h"

namespace spmd::kernels::cuda {

// Throws CudaError naming the call, CUDA's error string and where.
[[noreturn]] void ThrowCuda(cudaError_t error, const char* call, const char* file, int line);

#define SPMD_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    const cudaError_t spmd_cuda_error_ = (call);                               \
    if (spmd_cuda_error_ != cudaSuccess) {                                     \
      ::spmd::kernels::cuda::ThrowCuda(spmd_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)
// After a kernel launch: a bad configuration is reported here, not at the next sync.
#define SPMD_CUDA_CHECK_LAUNCH() SPMD_CUDA_CHECK(cudaGetLastError())

inline cudaStream_t ToCuda(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }

// Makes `device` the calling thread's current CUDA device for its lifetime (kernels launch
// on the current device; a tensor's stream belongs to its device) and restores the one
// before. Throws CudaError when the device cannot be set.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device device) : DeviceGuard(device.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// A grid-stride loop over [0, n) with 64-bit indices: for (SPMD_GRID_STRIDE(i, n)) {...}.
#define SPMD_GRID_STRIDE(i, n)                                                          \
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);     \
  i += static_cast<int64_t>(gridDim.x) * blockDim.x

// Launches `kernel` on `stream` with GridStride(n) (nothing when n <= 0) and checks the
// launch. The arguments are passed as the kernel's parameter types.
template <typename... Params, typename... Args>
void LaunchGridStride(void (*kernel)(Params...), int64_t n, cudaStream_t stream, Args&&... args) {
  const LaunchConfig c = GridStride(n);
  if (c.grid == 0) return;
  kernel<<<c.grid, c.block, 0, stream>>>(static_cast<Params>(args)...);
  SPMD_CUDA_CHECK_LAUNCH();
}

// Every input on one CUDA device (inputs[0]'s), else InvalidArgument "inputs[i].device";
// returns it. An empty list is InvalidArgument "inputs".
Device CheckOnOneDevice(const TensorArgs& inputs);

// An uninitialised tensor on `like`'s device and stream, from its allocator. (The CPU
// kernels' output limit, kernels/cpu/internal.h CheckOutputShape, is the caller's to check.)
inline Tensor NewOutput(const Tensor& like, Shape shape, DType dtype) {
  return Tensor::Uninitialized(std::move(shape), dtype, like.allocator(), like.stream());
}

// The arithmetic type of a storage type: the 2-byte floats compute in float32.
template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<BFloat16> {
  using type = float;
};
template <>
struct ComputeOf<Float16> {
  using type = float;
};
template <typename T>
using Compute = typename ComputeOf<T>::type;

// Element i of `p` in its compute type, and back (2-byte floats round to nearest even).
template <typename T>
__device__ __forceinline__ Compute<T> Load(const T* p, int64_t i) {
  return static_cast<Compute<T>>(p[i]);
}
template <typename T>
__device__ __forceinline__ void Store(T* p, int64_t i, Compute<T> v) {
  p[i] = T(v);
}

// Calls f(T{}) with T the C++ type of `dtype` among the floating dtypes (float32, float64,
// and with `half` the 2-byte ones); else Unsupported naming `field`.
template <typename F>
void DispatchFloating(DType dtype, const std::string& field, bool half, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kBFloat16:
      if (half) { f(BFloat16{}); return; }
      break;
    case DType::kFloat16:
      if (half) { f(Float16{}); return; }
      break;
    default: break;
  }
  ThrowUnsupported(field, "dtype " + std::string(ToString(dtype)) + " has no CUDA kernel here");
}

// Calls f(T{}) for any dtype of rules/model/dtype.h (the byte-moving kernels).
template <typename F>
void DispatchAny(DType dtype, const std::string& field, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kInt64: f(int64_t{}); return;
    case DType::kBool: f(bool{}); return;
    case DType::kBFloat16: f(BFloat16{}); return;
    case DType::kFloat16: f(Float16{}); return;
  }
  ThrowUnsupported(field, "dtype " + std::string(ToString(dtype)) + " has no CUDA kernel here");
}

// ConvertOnDevice (cast's conversion on the device) is declared in kernels/cuda/cuda.h.

}  // namespace spmd::kernels::cuda
