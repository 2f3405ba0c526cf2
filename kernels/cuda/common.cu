// The shared pieces of kernels/cuda/common.cuh and the host <-> device copies of cuda.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/backend_checks.h"
#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/index_fault.h"
#include "rules/ops/elementwise_plan.h"

namespace spmd::kernels::cuda {

void ThrowCuda(cudaError_t error, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(error) + " (" +
                  cudaGetErrorString(error) + ") at " + file + ":" + std::to_string(line));
}

DeviceGuard::DeviceGuard(int device) {
  SPMD_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    SPMD_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

Device CheckOnOneDevice(const TensorArgs& inputs) {
  cpu::internal::CheckArityAtLeast(inputs, 1);  // a CUDA kernel runs on its inputs' device
  return *checks::CheckOnOneDevice(inputs, DeviceKind::kCuda);
}

namespace {

template <typename S, typename D>
__global__ void ConvertKernel(const S* __restrict__ x, D* __restrict__ y, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) y[i] = CastElement<D>(x[i]);
}

// As ConvertKernel, for a floating source and an int64 target: values cast refuses leave
// their index in *first_bad (the smallest such index; the caller starts it at ~0).
template <typename S>
__global__ void ConvertToInt64Kernel(const S* __restrict__ x, int64_t* __restrict__ y, int64_t n,
                                     unsigned long long* first_bad) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const double v = AsDouble(x[i]);
    if (CastFitsInt64(v)) {
      y[i] = static_cast<int64_t>(::trunc(v));
    } else {
      y[i] = 0;
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

}  // namespace

Tensor ConvertOnDevice(const Tensor& t, DType to) {
  Tensor out = NewOutput(t, t.shape(), to);
  const int64_t n = t.numel();
  if (n == 0) return out;
  DeviceGuard guard(t.device());
  cudaStream_t stream = ToCuda(t.stream());
  if (t.dtype() == to) {
    SPMD_CUDA_CHECK(cudaMemcpyAsync(out.bytes(), t.bytes(), t.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return out;
  }
  DispatchAny(t.dtype(), "inputs[0].dtype", [&](auto s) {
    using S = decltype(s);
    const S* x = reinterpret_cast<const S*>(t.bytes());
    constexpr bool kFloating = !std::is_same_v<S, int64_t> && !std::is_same_v<S, bool>;
    if constexpr (kFloating) {
      if (to == DType::kInt64) {
        // The one check that needs the data: cast refuses values int64 cannot hold, so the
        // kernel notes the first one and the host waits for the answer.
        Tensor flag = NewOutput(t, {1}, DType::kInt64);
        SPMD_CUDA_CHECK(cudaMemsetAsync(flag.bytes(), 0xff, 8, stream));
        auto* first = reinterpret_cast<unsigned long long*>(flag.bytes());
        LaunchGridStride(ConvertToInt64Kernel<S>, n, stream, x,
                         reinterpret_cast<int64_t*>(out.bytes()), n, first);
        unsigned long long bad = 0;
        SPMD_CUDA_CHECK(cudaMemcpyAsync(&bad, first, 8, cudaMemcpyDeviceToHost, stream));
        SPMD_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (bad != ~0ull) {
          S value{};
          SPMD_CUDA_CHECK(cudaMemcpyAsync(&value, x + bad, sizeof(S), cudaMemcpyDeviceToHost, stream));
          SPMD_CUDA_CHECK(cudaStreamSynchronize(stream));
          plan::ThrowCastOutsideInt64(AsDouble(value), static_cast<int64_t>(bad));
        }
        return;
      }
    }
    DispatchAny(to, "attrs.dtype", [&](auto d) {
      using D = decltype(d);
      LaunchGridStride(ConvertKernel<S, D>, n, stream, x, reinterpret_cast<D*>(out.bytes()), n);
    });
  });
  return out;
}

int DeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it
    if (reason != nullptr) {
      *reason = std::string("no usable CUDA device: ") + cudaGetErrorName(error) + " (" +
                cudaGetErrorString(error) + ")";
    }
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "no CUDA device in this machine";
  return count;
}

namespace {

void CheckCudaDevice(Device device, const char* field) {
  std::string why;
  const int count = DeviceCount(&why);
  checks::CheckDeviceIndex(device, DeviceKind::kCuda, count, field, why);
}

}  // namespace

Stream NewStream(Device device) {
  CheckCudaDevice(device, "device");
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  SPMD_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream{s};
}

Tensor ToDevice(const Tensor& host, Device device, Stream stream) {
  checks::CheckHostTensor(host, "host");
  CheckCudaDevice(device, "device");
  Backend& backend = EnableCuda();
  Tensor out = Tensor::Uninitialized(host.shape(), host.dtype(), backend.AllocatorFor(device), stream);
  if (out.nbytes() == 0) return out;
  DeviceGuard guard(device);
  SPMD_CUDA_CHECK(cudaMemcpyAsync(out.bytes(), host.bytes(), host.nbytes(), cudaMemcpyHostToDevice,
                                  ToCuda(stream)));
  // The source is pageable host memory, which the copy may still read after the call
  // returns: wait, so that the caller may free it.
  SPMD_CUDA_CHECK(cudaStreamSynchronize(ToCuda(stream)));
  return out;
}

Tensor ToHost(const Tensor& tensor) {
  if (tensor.device().is_host()) return tensor;
  Tensor out = Tensor::Uninitialized(tensor.shape(), tensor.dtype());
  if (out.nbytes() == 0) {
    // No values, but a bad id behind an empty result is still the CPU kernel's error (it
    // refuses scatter into an empty dim); else the fault would surface at the next ToHost.
    CheckIndexFaults(tensor.device());
    return out;
  }
  DeviceGuard guard(tensor.device());
  cudaStream_t stream = ToCuda(tensor.stream());
  SPMD_CUDA_CHECK(cudaMemcpyAsync(out.bytes(), tensor.bytes(), tensor.nbytes(), cudaMemcpyDeviceToHost, stream));
  SPMD_CUDA_CHECK(cudaStreamSynchronize(stream));
  // A bad id behind these values is the CPU kernel's error, not zeros (index_fault.h).
  CheckIndexFaults(tensor.device());
  return out;
}

}  // namespace spmd::kernels::cuda
