#include <string>
#include <string_view>
#include <utility>

#include "kernels/cpu/kernels.h"
#include "rules/error.h"

namespace spmd::kernels {

// Generated from the op list: an op without its CPU kernel does not link.
CpuKernelFn FindCpuKernel(std::string_view op) {
  static constexpr std::pair<std::string_view, CpuKernelFn> kTable[] = {
#define SPMD_CPU_KERNEL_ENTRY(name) {#name, &cpu::name},
      SPMD_FOR_EACH_OP(SPMD_CPU_KERNEL_ENTRY)
#undef SPMD_CPU_KERNEL_ENTRY
  };
  for (const auto& [name, fn] : kTable) {
    if (name == op) return fn;
  }
  return nullptr;
}

bool HasCpuKernel(std::string_view op) { return FindCpuKernel(op) != nullptr; }

Tensors RunCpuKernel(std::string_view op, const TensorArgs& inputs, const Attrs& attrs) {
  CpuKernelFn fn = FindCpuKernel(op);
  if (fn == nullptr) {
    throw SpmdError(ErrorType::kUnknownOp, "op", "no op named '" + std::string(op) + "'");
  }
  return fn(inputs, attrs);
}

}  // namespace spmd::kernels
