// The CUDA kernels' table: one kernel per op of rules/engine/op_list.h, generated from the list
// (the families of kernels/cpu, one .cu file each, define them). Plain C++.
//
// A CUDA kernel has the CPU kernel's contract (kernels/cpu/kernels.h: attrs normalised plus
// the localized attrs; errors as SpmdError naming the field, as the references name them)
// on tensors of one CUDA device: it enqueues its work on inputs[0].stream() (after
// checking every input is on inputs[0]'s device: InvalidArgument "inputs[i].device"),
// allocates its outputs from inputs[0].allocator() on that stream, and returns without
// synchronizing. It reads shapes and attrs on the host; it never reads device memory on
// the host (a kernel that needs a value computed on the device, such as a count, keeps it
// on the device). The one exception is a check the CPU kernels make on the data with a
// typed error (cast to int64 of a value int64 cannot hold: ConvertOnDevice waits for a
// flag); such kernels say so.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/attrs.h"
#include "rules/ops/exchange_ops.h"
#include "rules/engine/op_list.h"
#include "rules/engine/phase.h"

namespace spmd::kernels::cuda {

using CudaKernelFn = Tensors (*)(const TensorArgs& inputs, const Attrs& attrs);

// How a kernel takes bfloat16 / float16 inputs.
enum class HalfInputs {
  kNative,   // as they are (2-byte storage, float32 arithmetic)
  kWidened,  // RunCudaKernel widens them to float32 around the float32 kernel
};

// One op's CUDA kernel.
struct CudaKernel {
  CudaKernelFn fn = nullptr;
  HalfInputs half = HalfInputs::kWidened;
};

// Every op's CUDA kernel, named as the op (the CPU kernel of `scatter` is cpu::scatter, its
// CUDA kernel ops::scatter), declared from rules/engine/op_list.h, so an op without one does not
// link. Each is defined at the bottom of its family's file (kernels/cuda/<family>.cu; the
// host-staged ones in staged.cc), on one line that op_completeness_test reads on machines
// without nvcc too:
//   const CudaKernel ops::scatter{&Scatter, HalfInputs::kWidened};
// The ops with an exchange inside (OpDecl::exchange) also have their phases,
// KernelRef{op, Phase::kStats} as ops::<op>_stats and KernelRef{op, Phase::kFinish} as
// ops::<op>_finish.
namespace ops {
#define SPMD_DECLARE_CUDA_KERNEL(name) extern const CudaKernel name;
SPMD_FOR_EACH_OP(SPMD_DECLARE_CUDA_KERNEL)
#undef SPMD_DECLARE_CUDA_KERNEL
#define SPMD_DECLARE_CUDA_PHASES(name) \
  extern const CudaKernel name##_stats;  \
  extern const CudaKernel name##_finish;
SPMD_FOR_EACH_EXCHANGE_OP(SPMD_DECLARE_CUDA_PHASES)
#undef SPMD_DECLARE_CUDA_PHASES
}  // namespace ops

// The kernel of an op (a name) or of one phase of its exchange (KernelRef{op, phase}), or
// nullptr when spmdkit has no such op or phase: every op and phase has one.
CudaKernelFn FindCudaKernel(const KernelRef& kernel);

// Runs the CUDA kernel of an op or phase on device tensors, as RunCpuKernel runs the CPU
// one: SpmdError(kUnknownOp, "op") for an op or phase spmdkit does not have; InvalidArgument ("inputs[i].device")
// for inputs not all on one CUDA device, and, as RunCpuKernel, ("inputs[i].dtype") for a
// 2-byte float input beside another floating dtype. The kernel runs with its inputs'
// device current. bfloat16 / float16 inputs: kernels that take them natively
// (HalfInputs::kNative) get them as they are; for the others they are widened to float32
// on the device, the float32 kernel runs, and float32 outputs are rounded once to the
// 2-byte dtype (what RunCpuKernel does on the host).
Tensors RunCudaKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs);

}  // namespace spmd::kernels::cuda
