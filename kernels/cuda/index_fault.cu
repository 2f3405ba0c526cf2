#include "kernels/cuda/index_fault.h"

#include "kernels/backend_checks.h"
#include "kernels/cuda/common.cuh"

namespace spmd::kernels::cuda {
namespace {

// One word per device (a __device__ variable exists once per device context).
__device__ uint32_t g_index_faults = 0;

constexpr IndexFaultOp kAll[] = {IndexFaultOp::kIndexSelect, IndexFaultOp::kGather,
                                 IndexFaultOp::kOneHot,      IndexFaultOp::kGatherNd,
                                 IndexFaultOp::kScatter,     IndexFaultOp::kScatterNdAdd};

}  // namespace

const char* IndexFaultOpName(IndexFaultOp op) {
  switch (op) {
    case IndexFaultOp::kIndexSelect: return "index_select";
    case IndexFaultOp::kGather: return "gather";
    case IndexFaultOp::kOneHot: return "one_hot";
    case IndexFaultOp::kGatherNd: return "gather_nd";
    case IndexFaultOp::kScatter: return "scatter";
    case IndexFaultOp::kScatterNdAdd: return "scatter_nd_add";
  }
  return "?";
}

const char* IndexFaultField(IndexFaultOp op) {
  return op == IndexFaultOp::kOneHot ? "inputs[0].data" : "inputs[1].data";
}

std::vector<IndexFaultOp> IndexFaultOps(uint32_t word) {
  std::vector<IndexFaultOp> ops;
  for (IndexFaultOp op : kAll) {
    if (word & static_cast<uint32_t>(op)) ops.push_back(op);
  }
  return ops;
}

uint32_t* IndexFaultWord() {
  void* p = nullptr;
  SPMD_CUDA_CHECK(cudaGetSymbolAddress(&p, g_index_faults));
  return static_cast<uint32_t*>(p);
}

uint32_t TakeIndexFaults(Device device) {
  checks::CheckDeviceKind(device, DeviceKind::kCuda, "device", "TakeIndexFaults");
  DeviceGuard guard(device);
  SPMD_CUDA_CHECK(cudaDeviceSynchronize());
  uint32_t word = 0;
  SPMD_CUDA_CHECK(cudaMemcpyFromSymbol(&word, g_index_faults, sizeof word));
  const uint32_t zero = 0;
  SPMD_CUDA_CHECK(cudaMemcpyToSymbol(g_index_faults, &zero, sizeof zero));
  return word;
}

void CheckIndexFaults(Device device) {
  const std::vector<IndexFaultOp> ops = IndexFaultOps(TakeIndexFaults(device));
  if (ops.empty()) return;
  ThrowInvalid(IndexFaultField(ops[0]),
               std::string("an id outside the valid range (or not a whole number) reached the CUDA ") +
                   IndexFaultOpName(ops[0]) + " kernel on " + ToString(device));
}

}  // namespace spmd::kernels::cuda
