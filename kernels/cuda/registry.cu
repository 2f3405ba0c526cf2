#include <optional>
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
    RegisterBlockAttentionKernels(t);
    RegisterOptimizerKernels(t);
    RegisterRandomKernels(t);
    RegisterUnaryMathKernels(t);
    RegisterStagedKernels(t);
    return t;
  }();
  return table;
}

constexpr std::string_view kOps[] = {
#define SPMD_CUDA_OP_NAME(name) #name,
    SPMD_FOR_EACH_OP(SPMD_CUDA_OP_NAME)
#undef SPMD_CUDA_OP_NAME
};

// The 2-byte float dtype of the inputs, if any; InvalidArgument ("inputs[i].dtype") when a
// 2-byte float input meets another floating dtype (RunCpuKernel's check, in its order:
// before the kernel's own checks, over every input, value or not).
std::optional<DType> TwoByteDType(const TensorArgs& inputs) {
  std::optional<DType> found;
  size_t first = 0;
  for (size_t i = 0; i < inputs.size() && !found; ++i) {
    if (IsTwoByteFloat(inputs[i].dtype())) {
      found = inputs[i].dtype();
      first = i;
    }
  }
  if (!found) return std::nullopt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType d = inputs[i].dtype();
    if (IsFloating(d) && d != *found) {
      ThrowInvalid("inputs[" + std::to_string(i) + "].dtype",
                   std::string(ToString(d)) + " mixed with " + std::string(ToString(*found)) +
                       " of inputs[" + std::to_string(first) + "]");
    }
  }
  return found;
}

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
  if (inputs.empty()) return e->fn(inputs, attrs);  // the kernel's arity check names "inputs"
  DeviceGuard guard(CheckOnOneDevice(inputs));
  const std::optional<DType> two_byte = TwoByteDType(inputs);
  if (!two_byte || e->takes_half) return e->fn(inputs, attrs);
  const DType narrow = *two_byte;
  // Widened to float32 on the device, the float32 kernel run, float32 outputs rounded once.
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
