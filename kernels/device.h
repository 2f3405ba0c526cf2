// Where a tensor's memory lives (Device) and the queue its work is ordered on (Stream).
//
// Host memory is device {kHost, 0}; CUDA device k is {kCuda, k}; simulated device k is
// {kSim, k} (kernels/sim/sim.h: an asynchronous device built on every machine, for tests).
// A Stream is an opaque handle owned by the device's runtime (a cudaStream_t on CUDA, a
// worker's queue on the sim); the host has one stream,
// the null handle, on which work completes before the call that enqueued it returns.
// Plain C++ with no runtime dependency, so CUDA code can include it.
#pragma once

#include <string>

namespace spmd::kernels {

enum class DeviceKind { kHost, kCuda, kSim };

struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;  // the CUDA (or sim) ordinal; 0 for the host

  static Device Host() { return {}; }
  static Device Cuda(int index) { return {DeviceKind::kCuda, index}; }
  static Device Sim(int index) { return {DeviceKind::kSim, index}; }
  bool is_host() const { return kind == DeviceKind::kHost; }
  bool operator==(const Device&) const = default;
};

// "host", "cuda:0", "sim:0".
inline std::string ToString(Device device) {
  if (device.is_host()) return "host";
  return (device.kind == DeviceKind::kSim ? "sim:" : "cuda:") + std::to_string(device.index);
}

// The queue work on a device is ordered on. Two calls on the same stream run in call order;
// the null handle is the device's default stream (the only one the host has).
struct Stream {
  void* handle = nullptr;
  bool operator==(const Stream&) const = default;
};

}  // namespace spmd::kernels
