// Index faults: ids that the CPU kernels refuse (SpmdError naming inputs[i].data), seen by
// the CUDA kernels on the device, where the ids live. A CUDA kernel never reads device
// memory on the host and never waits for its own work, so it cannot throw for them when
// it runs. Instead each such kernel
//   - writes what docs/GPU.md ("Ids the device cannot refuse") states (a zero where the bad id would have
//     read; an update with a bad id is dropped), so the result is defined, and
//   - records the fault in its device's fault word (one bit per op).
// CheckIndexFaults waits for the device and throws the CPU kernel's error for the first op
// that saw a bad id since the last look. CudaBackend::Synchronize and ToHost call it: when
// the host is about to rely on a device result, a bad id behind it is an error, never a
// silent zero.
// Plain C++ (no CUDA header).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device.h"

namespace spmd::kernels::cuda {

// The ops that can record a fault (a bit each in the device's fault word).
enum class IndexFaultOp : uint32_t {
  kIndexSelect = 1u << 0,
  kGather = 1u << 1,
  kOneHot = 1u << 2,
  kGatherNd = 1u << 3,
  kScatter = 1u << 4,
  kScatterNdAdd = 1u << 5,
};

// The op's name and the field the CPU kernel's error names ("inputs[1].data").
const char* IndexFaultOpName(IndexFaultOp op);
const char* IndexFaultField(IndexFaultOp op);

// The ops named by a fault word, in the enum's order.
std::vector<IndexFaultOp> IndexFaultOps(uint32_t word);

// The fault word of the current CUDA device (a device address, for the kernels: they
// atomicOr their op's bit into it).
uint32_t* IndexFaultWord();

// Waits for every stream of `device` (cudaDeviceSynchronize), then returns and clears its
// fault word. Never called by the kernels themselves.
uint32_t TakeIndexFaults(Device device);

// TakeIndexFaults, then SpmdError(kInvalidArgument) naming the CPU kernel's field for the
// first op recorded, when any was.
void CheckIndexFaults(Device device);

}  // namespace spmd::kernels::cuda
