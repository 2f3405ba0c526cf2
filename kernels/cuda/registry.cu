#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"
#include "rules/op_list.h"

namespace spmd::kernels::cuda {

void KernelTable::Add(std::string_view op, CudaKernelFn fn, bool takes_half) {
  if (Find(op) != nullptr) {
    throw std::logic_error("two CUDA kernels registered for op '" + std::string(op) + "'");
  }
  entries_.push_back({std::string(op), fn, takes_half});
}

const KernelTable::Entry* KernelTable::Find(std::string_view op) const {
  for (const Entry& e : entries_) {
    if (e.op == op) return &e;
  }
  return nullptr;
}

namespace {

const KernelTable& Table() {
  static const KernelTable table = [] {
    KernelTable t;
    RegisterElementwiseKernels(t);
    RegisterContractionKernels(t);
    RegisterReductionKernels(t);
    RegisterNormKernels(t);
    RegisterShapeKernels(t);
    RegisterIndexingKernels(t);
    RegisterScatterKernels(t);
    RegisterSortKernels(t);
    RegisterFusedKernels(t);
    RegisterRandomKernels(t);
    return t;
  }();
  return table;
}

constexpr std::string_view kOps[] = {
#define SPMD_CUDA_OP_NAME(name) #name,
    SPMD_FOR_EACH_OP(SPMD_CUDA_OP_NAME)
#undef SPMD_CUDA_OP_NAME
};

bool IsOp(std::string_view op) {
  for (std::string_view name : kOps) {
    if (name == op) return true;
  }
  return false;
}

}  // namespace

CudaKernelFn FindCudaKernel(std::string_view op) {
  const KernelTable::Entry* e = Table().Find(op);
  return e == nullptr ? nullptr : e->fn;
}

std::vector<std::string> OpsWithoutCudaKernel() {
  std::vector<std::string> missing;
  for (std::string_view op : kOps) {
    if (Table().Find(op) == nullptr) missing.emplace_back(op);
  }
  return missing;
}

Tensors RunCudaKernel(std::string_view op, const TensorArgs& inputs, const Attrs& attrs) {
  const KernelTable::Entry* e = Table().Find(op);
  if (e == nullptr) {
    if (!IsOp(op)) {
      throw SpmdError(ErrorType::kUnknownOp, "op", "no op named '" + std::string(op) + "'");
    }
    ThrowUnsupported("op", "'" + std::string(op) + "' has no CUDA kernel");
  }
  if (!inputs.empty()) CheckOnOneDevice(inputs);
  DType narrow = DType::kFloat32;
  bool has_narrow = false;
  for (const Tensor& t : inputs) {
    if (IsTwoByteFloat(t.dtype())) {
      narrow = t.dtype();
      has_narrow = true;
      break;
    }
  }
  if (!has_narrow || e->takes_half) return e->fn(inputs, attrs);
  // Widened to float32 on the device, the float32 kernel run, float32 outputs rounded once
  // (the mixing check, a 2-byte float beside another floating dtype, is the kernel's: it
  // sees float32 beside float64 and names the field).
  std::vector<Tensor> widened;
  widened.reserve(inputs.size());
  std::vector<const Tensor*> args;
  args.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (t.dtype() == narrow) {
      widened.push_back(ConvertOnDevice(t, DType::kFloat32));
      args.push_back(&widened.back());
    } else {
      args.push_back(&t);
    }
  }
  Tensors outputs = e->fn(TensorArgs(std::move(args)), attrs);
  if (op == "cast") return outputs;
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::kFloat32) t = ConvertOnDevice(t, narrow);
  }
  return outputs;
}

}  // namespace spmd::kernels::cuda
