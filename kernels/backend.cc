#include "kernels/backend.h"

#include <atomic>

#include "kernels/cpu/cpu_backend.h"
#include "rules/model/error.h"

namespace spmd::kernels {
namespace {

constexpr int kNumDeviceKinds = 3;  // DeviceKind's values

std::atomic<Backend*>& Registered(DeviceKind kind) {
  static std::atomic<Backend*> slots[kNumDeviceKinds] = {};
  return slots[static_cast<int>(kind)];
}

}  // namespace

Backend& BackendFor(Device device) {
  if (Backend* b = Registered(device.kind).load(std::memory_order_acquire)) return *b;
  if (device.is_host()) {
    static CpuBackend cpu;
    return cpu;
  }
  ThrowUnsupported("device", "no backend for " + ToString(device) + " in this build");
}

Backend* SetBackend(DeviceKind kind, Backend* backend) {
  return Registered(kind).exchange(backend, std::memory_order_acq_rel);
}

}  // namespace spmd::kernels
