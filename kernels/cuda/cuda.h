// The CUDA backend's public face: plain C++ (no CUDA header), so host code and tests that
// never touch a GPU can include it in every build that has the CUDA parts (SPMD_HAVE_CUDA).
//
// Using a GPU: call EnableCuda() once per process (it registers the CUDA Backend with
// kernels::SetBackend, so BackendFor(Device::Cuda(k)) finds it), move tensors with
// ToDevice / ToHost (the only host<->device copies: nothing crosses implicitly), and hand
// device tensors to Dispatch, the reshard executor or a Backend as host tensors are handed.
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/pool_stats.h"
#include "kernels/device.h"
#include "kernels/tensor.h"

namespace spmd::kernels::cuda {

// A failure of the CUDA runtime, cuBLAS or a kernel launch (not the caller's input: that
// is SpmdError). The message names the call, the CUDA error string, and the file:line.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The number of CUDA devices this process can use; 0 where there is none, with the reason
// (no driver, no device, ...) in `*reason` when given. Never throws.
int DeviceCount(std::string* reason = nullptr);

// Registers the CUDA Backend for DeviceKind::kCuda (idempotent, thread-safe) and returns
// it. Throws SpmdError(kUnsupported, "device") when DeviceCount() is 0, with the reason.
Backend& EnableCuda();

// A new stream on `device` (non-blocking with respect to the legacy default stream);
// streams live as long as the process. Stream{} is the device's default stream.
Stream NewStream(Device device);

// Copies a host tensor to `device`, ordered on `stream`, into memory from that device's
// stream-ordered pool (registering the backend as EnableCuda does). Returns once the copy
// has completed (the source is pageable host memory), so the host tensor may be destroyed
// at once. InvalidArgument ("host") for a tensor not on the host, ("device") for a device
// this process cannot use.
Tensor ToDevice(const Tensor& host, Device device, Stream stream = {});
// Copies a tensor (on any device) to the host; waits for its stream first. Host tensors
// are copied as they are.
Tensor ToHost(const Tensor& tensor);

// `t` (on a CUDA device) converted to `to` on t's device and stream, from t's allocator:
// cast's conversion rules (kernels/cpu/elementwise.cc; rules/model/half.h for the 2-byte
// floats), for every pair of dtypes. A floating value int64 cannot hold (NaN, inf,
// |v| >= 2^63) converted to int64 is InvalidArgument ("inputs[0].data"), as cast refuses
// it: that check waits for the device. RunCudaKernel widens 2-byte floats with it.
Tensor ConvertOnDevice(const Tensor& t, DType to);

// The memory a device's allocator has handed out and not freed (bytes, peak, live blocks;
// kernels/cuda/pool_stats.h). Freed blocks stay cached in the device's pool (its release
// threshold is the maximum), so the driver's figure is higher. InvalidArgument ("device")
// for a device that is not a usable CUDA device.
PoolUsage MemoryUsage(Device device);
// Sets the peak of MemoryUsage to the bytes in use now.
void ResetPeakMemory(Device device);
// Waits for the device, then returns the pool's cached free memory to the driver.
void ReleaseCachedMemory(Device device);

}  // namespace spmd::kernels::cuda
