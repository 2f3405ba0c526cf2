// What every backend refuses before it touches a device, written once for the CPU, simulated
// and CUDA backends (kernels/backend.h) and their kernel registries (RunCpuKernel,
// RunCudaKernel): the same request gets the same typed error, naming the same field, on every
// device. What is left in a backend's own files is what only that device can tell (a CUDA
// pointer's attributes, how many CUDA devices the driver sees, a sim buffer's bounds).
// Plain C++ (kernels/cuda includes it).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "kernels/device.h"
#include "kernels/tensor.h"
#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"

namespace spmd::kernels::checks {

// "host", "CUDA", "sim": a device kind as messages name it.
inline const char* KindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost: return "host";
    case DeviceKind::kCuda: return "CUDA";
    case DeviceKind::kSim: return "sim";
  }
  return "unknown";
}

// `device` is of `kind`; else InvalidArgument (`field`), the message saying who asked (`what`).
inline void CheckDeviceKind(Device device, DeviceKind kind, const std::string& field, const std::string& what) {
  if (device.kind != kind) {
    ThrowInvalid(field, what + " takes " + KindName(kind) + " devices, not " + ToString(device));
  }
}

// `device` is one of the `count` devices of `kind` this process has (index 0 .. count-1);
// else InvalidArgument (`field`) saying how many there are and, when given, why none are.
inline void CheckDeviceIndex(Device device, DeviceKind kind, int count, const std::string& field,
                             const std::string& why = "") {
  if (device.kind != kind || device.index < 0 || device.index >= count) {
    ThrowInvalid(field, ToString(device) + " is not a " + KindName(kind) + " device of this process (" +
                            std::to_string(count) + " visible" + (why.empty() ? "" : ": " + why) + ")");
  }
}

// A host buffer handed to CopyFromHost / CopyToHost (`field`: "host_src", "host_dst"): not null.
inline void CheckHostBuffer(const void* host, const char* field) {
  if (host == nullptr) ThrowInvalid(field, "null");
}

// ToDevice's source (`field`) is a host tensor.
inline void CheckHostTensor(const Tensor& host, const char* field) {
  if (!host.device().is_host()) {
    ThrowInvalid(field, "ToDevice copies a host tensor, got one on " + ToString(host.device()));
  }
}

// Backend::RunKernel's inputs: every one on one device of `kind` (inputs[0]'s), else
// InvalidArgument "inputs[i].device" naming the first that is not. Returns that device;
// nullopt for no inputs (the kernel's own arity check names "inputs").
inline std::optional<Device> CheckOnOneDevice(const TensorArgs& inputs, DeviceKind kind) {
  if (inputs.empty()) return std::nullopt;
  const Device device = inputs[0].device();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Device d = inputs[i].device();
    if (d.kind != kind || d != device) {
      ThrowInvalid("inputs[" + std::to_string(i) + "].device",
                   std::string("the ") + KindName(kind) + " backend runs on tensors of one " + KindName(kind) +
                       " device, got " + ToString(d) + (i == 0 ? "" : " beside " + ToString(device) + " of inputs[0]"));
    }
  }
  return device;
}

// The 2-byte float dtype (bfloat16 / float16) of the inputs, if any; InvalidArgument
// ("inputs[i].dtype") when a 2-byte float input meets an input of another floating dtype
// (every input, value or not, before the kernel's own checks: RunCpuKernel's order).
inline std::optional<DType> TwoByteDType(const TensorArgs& inputs) {
  size_t first = inputs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (IsTwoByteFloat(inputs[i].dtype())) {
      first = i;
      break;
    }
  }
  if (first == inputs.size()) return std::nullopt;
  const DType narrow = inputs[first].dtype();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType d = inputs[i].dtype();
    if (IsFloating(d) && d != narrow) {
      ThrowInvalid("inputs[" + std::to_string(i) + "].dtype",
                   std::string(ToString(d)) + " mixed with " + std::string(ToString(narrow)) +
                       " of inputs[" + std::to_string(first) + "]");
    }
  }
  return narrow;
}

// Backend::Scale: a bool buffer has no multiple or average (Unsupported "dtype").
inline void CheckScalable(DType dtype) {
  if (dtype == DType::kBool) ThrowUnsupported("dtype", "scaling a bool buffer");
}

// Backend::Reduce (and a Communicator's reductions, `field` "<call>.op"): bool buffers
// reduce by max / min / any / all / prod only, not sum or avg (Unsupported `field`).
inline void CheckReducible(DType dtype, ReduceOp op, const std::string& field = "op") {
  if (dtype == DType::kBool && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    ThrowUnsupported(field, std::string(ToString(op)) + " on bool");
  }
}

}  // namespace spmd::kernels::checks
