// Where training's tensors live (TrainOptions::device): the host, a CUDA device or a
// simulated one (kernels/sim/sim.h). The one door between host and device memory in
// train/: host values (initial parameters, masks, tokens) go up through OnDevice, scalars
// (the loss, a squared norm) and gathered parameters come back through ToHostTensor /
// ReadScalar, each after its stream has run everything queued before (the backend's
// ToHost synchronizes). Nothing else in train/ reads device memory from the host.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/device.h"
#include "kernels/tensor.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/host_values.h"
#include "runtime/exec/dist_tensor.h"

namespace spmd::train {

// How tensors cross between the host and one kind of device: the backend's ToDevice /
// ToHost (kernels/sim/sim.h, kernels/cuda/cuda.h). spmd_train links neither backend (the
// installed package has none); a program registers the kinds it links, e.g. with
// EnableSimTraining (train/device_sim.h) or EnableCudaTraining (train/device_cuda.h).
struct DeviceTransfer {
  kernels::Tensor (*to_device)(const kernels::Tensor& host, kernels::Device device, kernels::Stream stream);
  kernels::Tensor (*to_host)(const kernels::Tensor& tensor);
};
void RegisterDeviceTransfer(kernels::DeviceKind kind, DeviceTransfer transfer);
// Whether tensors can be placed on `device` (the host always; others once registered).
bool DeviceAvailable(kernels::Device device);

// "cpu" (the host), "sim" (device index % 8) or "cuda" (device `index`): InvalidArgument
// naming `field` for anything else, and for a kind not registered in this program (cuda
// in a build without CUDA).
kernels::Device ParseDevice(const std::string& text, int index, const std::string& field);

// A host tensor copied to `device`, ordered on `stream` (the host: `host` itself).
kernels::Tensor OnDevice(const kernels::Tensor& host, kernels::Device device, kernels::Stream stream);
// The same DistTensor with its local shard on `device` (no-op for the host).
runtime::DistTensor OnDevice(runtime::DistTensor host, kernels::Device device, kernels::Stream stream);
// A copy on the host once `t`'s stream has run everything queued so far (host: `t`).
kernels::Tensor ToHostTensor(const kernels::Tensor& t);
// Element `i` of a float64 or float32 tensor as a double, read on the host (ToHostTensor).
double ReadScalar(const kernels::Tensor& t, int64_t i = 0);

// Collectives on small host arrays (the control plane: agreement on errors, manifests,
// nonces) through a communicator of any device: runtime/comm/host_values.h.
using runtime::HostAllGather;
using runtime::HostAllReduce;
using runtime::HostBroadcast;

}  // namespace spmd::train
