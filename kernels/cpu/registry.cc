#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/backend_checks.h"
#include "kernels/cpu/kernels.h"
#include "rules/model/error.h"
#include "rules/ops/exchange_ops.h"
#include "rules/model/half.h"
#include "rules/engine/phase.h"

namespace spmd::kernels {

// Generated from the op list and the exchange list (rules/ops/exchange_ops.h): an op or
// phase without its CPU kernel does not link.
CpuKernelFn FindCpuKernel(const KernelRef& kernel) {
  struct Entry {
    std::string_view op;
    std::optional<Phase> phase;
    CpuKernelFn fn;
  };
  static constexpr Entry kTable[] = {
#define SPMD_CPU_KERNEL_ENTRY(name) {#name, std::nullopt, &cpu::name},
      SPMD_FOR_EACH_OP(SPMD_CPU_KERNEL_ENTRY)
#undef SPMD_CPU_KERNEL_ENTRY
#define SPMD_CPU_EXCHANGE_ENTRIES(name) \
  {#name, Phase::kStats, &cpu::name##_stats}, {#name, Phase::kFinish, &cpu::name##_finish},
      SPMD_FOR_EACH_EXCHANGE_OP(SPMD_CPU_EXCHANGE_ENTRIES)
#undef SPMD_CPU_EXCHANGE_ENTRIES
  };
  for (const Entry& e : kTable) {
    if (e.op == kernel.op && e.phase == kernel.phase) return e.fn;
  }
  return nullptr;
}

bool HasCpuKernel(const KernelRef& kernel) { return FindCpuKernel(kernel) != nullptr; }

namespace {

// `t` (bfloat16 or float16) as float32, exactly.
Tensor ToFloat32(const Tensor& t) {
  Tensor out = Tensor::Uninitialized(t.shape(), DType::kFloat32);
  float* o = out.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::kBFloat16) {
    const BFloat16* x = t.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(x[i]);
  } else {
    const Float16* x = t.data<Float16>();
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(x[i]);
  }
  return out;
}

// `t` (float32) rounded to `dtype` (bfloat16 or float16), to nearest even.
Tensor FromFloat32(const Tensor& t, DType dtype) {
  Tensor out = Tensor::Uninitialized(t.shape(), dtype);
  const float* x = t.data<float>();
  const int64_t n = t.numel();
  if (dtype == DType::kBFloat16) {
    BFloat16* o = out.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) o[i] = BFloat16(x[i]);
  } else {
    Float16* o = out.data<Float16>();
    for (int64_t i = 0; i < n; ++i) o[i] = Float16(x[i]);
  }
  return out;
}

}  // namespace

Tensors RunCpuKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  CpuKernelFn fn = FindCpuKernel(kernel);
  if (fn == nullptr) ThrowUnknownKernel(kernel);
  const std::optional<DType> narrow = checks::TwoByteDType(inputs);
  if (!narrow) return fn(inputs, attrs);
  // Computed in float32: the 2-byte inputs converted (exactly), the float32 kernel run,
  // its float32 outputs rounded once to the inputs' dtype. cast's output is exactly
  // attrs.dtype already (the kernel rounds to a 2-byte target itself).
  std::vector<Tensor> converted;
  converted.reserve(inputs.size());
  std::vector<const Tensor*> args;
  args.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (t.dtype() == *narrow) {
      converted.push_back(ToFloat32(t));
      args.push_back(&converted.back());
    } else {
      args.push_back(&t);
    }
  }
  Tensors outputs = fn(TensorArgs(std::move(args)), attrs);
  if (kernel == KernelRef("cast")) return outputs;
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::kFloat32) t = FromFloat32(t, *narrow);
  }
  return outputs;
}

}  // namespace spmd::kernels
