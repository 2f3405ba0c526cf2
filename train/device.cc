#include "train/device.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>
#include <mutex>
#include <utility>

#include "rules/model/error.h"

namespace spmd::train {

namespace {

constexpr int kKinds = 3;  // DeviceKind: host, cuda, sim

std::mutex& TableMutex() {
  static std::mutex mutex;
  return mutex;
}

std::array<DeviceTransfer, kKinds>& Table() {
  static std::array<DeviceTransfer, kKinds> table{};
  return table;
}

DeviceTransfer TransferFor(kernels::DeviceKind kind, const std::string& field, const std::string& what) {
  std::lock_guard<std::mutex> lock(TableMutex());
  const DeviceTransfer t = Table()[static_cast<int>(kind)];
  if (t.to_device == nullptr) ThrowInvalid(field, what + ": this program has no transfer for that device");
  return t;
}

}  // namespace

void RegisterDeviceTransfer(kernels::DeviceKind kind, DeviceTransfer transfer) {
  if (kind == kernels::DeviceKind::kHost) ThrowInvalid("kind", "the host needs no transfer");
  if (transfer.to_device == nullptr || transfer.to_host == nullptr) ThrowInvalid("transfer", "null function");
  std::lock_guard<std::mutex> lock(TableMutex());
  Table()[static_cast<int>(kind)] = transfer;
}

bool DeviceAvailable(kernels::Device device) {
  if (device.is_host()) return true;
  std::lock_guard<std::mutex> lock(TableMutex());
  return Table()[static_cast<int>(device.kind)].to_device != nullptr;
}

kernels::Device ParseDevice(const std::string& text, int index, const std::string& field) {
  kernels::Device device;
  if (text == "cpu") {
    device = kernels::Device::Host();
  } else if (text == "sim") {
    device = kernels::Device::Sim(index % 8);  // kernels::sim::kMaxSimDevices
  } else if (text == "cuda") {
    device = kernels::Device::Cuda(index);
  } else {
    ThrowInvalid(field, "'" + text + "' is not cpu, sim or cuda");
  }
  if (!DeviceAvailable(device)) {
    ThrowInvalid(field, text + " is not available in this build" +
                            (text == "cuda" ? std::string(" (configure with -DSPMD_WITH_CUDA=ON on a machine "
                                                          "with the CUDA toolkit)")
                                            : std::string()));
  }
  return device;
}

kernels::Tensor OnDevice(const kernels::Tensor& host, kernels::Device device, kernels::Stream stream) {
  if (device.is_host()) return host;
  return TransferFor(device.kind, "device", kernels::ToString(device)).to_device(host, device, stream);
}

runtime::DistTensor OnDevice(runtime::DistTensor host, kernels::Device device, kernels::Stream stream) {
  if (device.is_host() || !host.has_local()) return host;
  return runtime::DistTensor::FromLocal(OnDevice(host.local(), device, stream), host.shape(), host.dtype(),
                                        host.mesh(), host.dist_attr(), host.process_id());
}

kernels::Tensor ToHostTensor(const kernels::Tensor& t) {
  if (t.device().is_host()) return t;
  return TransferFor(t.device().kind, "tensor", "a tensor on " + kernels::ToString(t.device())).to_host(t);
}

double ReadScalar(const kernels::Tensor& t, int64_t i) {
  if (i < 0 || i >= t.numel()) {
    ThrowInvalid("i", "element " + std::to_string(i) + " of a tensor of " + std::to_string(t.numel()));
  }
  if (t.dtype() != DType::kFloat64 && t.dtype() != DType::kFloat32) {
    ThrowInvalid("tensor", "ReadScalar reads float64 or float32 tensors");
  }
  const kernels::Tensor host = ToHostTensor(t);  // t itself on the host
  return host.dtype() == DType::kFloat64 ? host.data<double>()[i] : static_cast<double>(host.data<float>()[i]);
}

}  // namespace spmd::train
