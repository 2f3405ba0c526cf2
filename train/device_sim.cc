#include "train/device_sim.h"

#include "kernels/sim/sim.h"
#include "train/device.h"

namespace spmd::train {

void EnableSimTraining() {
  kernels::sim::EnableSim();
  RegisterDeviceTransfer(kernels::DeviceKind::kSim,
                         {[](const kernels::Tensor& host, kernels::Device device, kernels::Stream stream) {
                            return kernels::sim::ToDevice(host, device, stream);
                          },
                          [](const kernels::Tensor& t) { return kernels::sim::ToHost(t); }});
}

}  // namespace spmd::train
