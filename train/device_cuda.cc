#include "train/device_cuda.h"

#include "kernels/cuda/cuda.h"
#include "train/device.h"

namespace spmd::train {

void EnableCudaTraining() {
  kernels::cuda::EnableCuda();
  RegisterDeviceTransfer(kernels::DeviceKind::kCuda,
                         {[](const kernels::Tensor& host, kernels::Device device, kernels::Stream stream) {
                            return kernels::cuda::ToDevice(host, device, stream);
                          },
                          [](const kernels::Tensor& t) { return kernels::cuda::ToHost(t); }});
}

}  // namespace spmd::train
