#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend_checks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {

namespace {

// Generated from the op list (kernels/cuda/registry.h): an op without its CUDA kernel does
// not link.
// Keyed by (op, phase): an op's own kernel has no phase.
struct Entry {
  std::string_view op;
  std::optional<Phase> phase;
  const CudaKernel* kernel;
};
const Entry kTable[] = {
#define SPMD_CUDA_KERNEL_ENTRY(name) {#name, std::nullopt, &ops::name},
    SPMD_FOR_EACH_OP(SPMD_CUDA_KERNEL_ENTRY)
#undef SPMD_CUDA_KERNEL_ENTRY
#define SPMD_CUDA_PHASE_ENTRIES(name) \
  {#name, Phase::kStats, &ops::name##_stats}, {#name, Phase::kFinish, &ops::name##_finish},
    SPMD_FOR_EACH_EXCHANGE_OP(SPMD_CUDA_PHASE_ENTRIES)
#undef SPMD_CUDA_PHASE_ENTRIES
};

const CudaKernel* Find(const KernelRef& key) {
  for (const Entry& e : kTable) {
    if (e.op == key.op && e.phase == key.phase) return e.kernel;
  }
  return nullptr;
}

}  // namespace

CudaKernelFn FindCudaKernel(const KernelRef& kernel) {
  const CudaKernel* k = Find(kernel);
  return k == nullptr ? nullptr : k->fn;
}

Tensors RunCudaKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  const CudaKernel* e = Find(kernel);
  if (e == nullptr) ThrowUnknownKernel(kernel);
  if (inputs.empty()) return e->fn(inputs, attrs);  // the kernel's arity check names "inputs"
  DeviceGuard guard(CheckOnOneDevice(inputs));
  const std::optional<DType> two_byte = checks::TwoByteDType(inputs);
  if (!two_byte || e->half == HalfInputs::kNative) return e->fn(inputs, attrs);
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
  if (kernel == KernelRef("cast")) return outputs;
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::kFloat32) t = ConvertOnDevice(t, narrow);
  }
  return outputs;
}

}  // namespace spmd::kernels::cuda
