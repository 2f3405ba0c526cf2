// The CUDA kernels' table: one entry per op of rules/op_list.h, filled by one registration
// function per family of ops (the families of kernels/cpu, one .cu file each). Plain C++.
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
#include "rules/attrs.h"

namespace spmd::kernels::cuda {

using CudaKernelFn = Tensors (*)(const TensorArgs& inputs, const Attrs& attrs);

// Where a family's registration function puts its kernels.
class KernelTable {
 public:
  struct Entry {
    std::string op;
    CudaKernelFn fn = nullptr;
    // True when the kernel takes bfloat16 / float16 inputs itself (2-byte storage, float32
    // arithmetic); else RunCudaKernel widens them to float32 around it.
    bool takes_half = false;
  };
  // Adds `op`'s kernel; a second kernel for one op is a programming error (std::logic_error).
  void Add(std::string_view op, CudaKernelFn fn, bool takes_half = false);
  const Entry* Find(std::string_view op) const;

 private:
  std::vector<Entry> entries_;
};

// One per family; each lives in its family's .cu file (kernels/cuda/<family>.cu).
void RegisterElementwiseKernels(KernelTable& table);
void RegisterContractionKernels(KernelTable& table);
void RegisterReductionKernels(KernelTable& table);
void RegisterNormKernels(KernelTable& table);
void RegisterShapeKernels(KernelTable& table);
void RegisterIndexingKernels(KernelTable& table);
void RegisterScatterKernels(KernelTable& table);
void RegisterSortKernels(KernelTable& table);
void RegisterFusedKernels(KernelTable& table);
void RegisterRandomKernels(KernelTable& table);
void RegisterUnaryMathKernels(KernelTable& table);
void RegisterBlockAttentionKernels(KernelTable& table);
void RegisterOptimizerKernels(KernelTable& table);
// Ops without a device kernel yet, run through the host (kernels/cuda/staged.cc).
void RegisterStagedKernels(KernelTable& table);

// The kernel of `op`, or nullptr when it has none (yet).
CudaKernelFn FindCudaKernel(std::string_view op);
// The ops of rules/op_list.h without a CUDA kernel, in list order (the completeness test
// names them).
std::vector<std::string> OpsWithoutCudaKernel();

// Runs `op`'s CUDA kernel on device tensors, as RunCpuKernel runs the CPU one: SpmdError
// (kUnknownOp, "op") for an op spmdkit does not have, SpmdError(kUnsupported, "op") for
// one without a CUDA kernel; InvalidArgument ("inputs[i].device") for inputs not all on
// one CUDA device, and, as RunCpuKernel, ("inputs[i].dtype") for a 2-byte float input
// beside another floating dtype. The kernel runs with its inputs' device current.
// bfloat16 / float16 inputs: kernels that take them natively
// (their family's file says which) get them as they are; for the others they are widened
// to float32 on the device, the float32 kernel runs, and float32 outputs are rounded once
// to the 2-byte dtype (what RunCpuKernel does on the host).
Tensors RunCudaKernel(std::string_view op, const TensorArgs& inputs, const Attrs& attrs);

}  // namespace spmd::kernels::cuda
