// CPU kernels: the local compute of every op in rules/engine/op_list.h, in float32 and float64.
//
// A kernel runs one op on one rank's local tensors (or on whole tensors: the same thing on
// one device). It computes what the float64 reference (reference/) computes, written for
// speed and kept separate from it so that the oracle and the kernels do not share bugs.
// No communication and no rule logic live here; what depends on the shard (the localized
// part Attrs::local() of rules/model/attrs.h: local.count, local.vocab_start, local.exact, ...,
// and rewritten attrs such as triu's diagonal) comes from the op's localizer (rules/engine/op_decl.h).
//
// Dtypes (kernels/README.md has the details):
// - The compute dtype is the dtype of the op's floating value inputs: float32 or float64.
//   Mixing float32 and float64 among them is InvalidArgument ("inputs[i].dtype"). With no
//   floating value input (an int64 or bool x) it is float64. int64 and bool inputs used as
//   values are converted to the compute dtype; ids, labels and conditions are read as
//   they are (integral floats are accepted, as the references accept them).
// - bfloat16 / float16 are computed in float32 (RunCpuKernel, below).
// - Outputs follow the reference's dtype rules (docs/OPS.md "Reference decisions" 1), with
//   one difference: where the reference outputs float64, the kernel outputs the compute
//   dtype (float32 in, float32 out). cast outputs exactly attrs.dtype; shape ops keep x's
//   dtype (any dtype: they move bytes); argmax gives int64; comparisons, any, all give bool.
// Errors: SpmdError naming the field exactly as the references do (the property tests
// check that both refuse the same inputs with the same type and field). Never a crash.
#pragma once

#include <functional>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/attrs.h"
#include "rules/engine/op_list.h"
#include "rules/engine/phase.h"
#include "rules/ops/exchange_ops.h"

namespace spmd::kernels {

// One op's CPU kernel. `attrs` are normalised (every declared attr present, as
// OpDecl::NormalizeAttrs gives them), plus any localized attrs. `inputs` are borrowed
// (TensorArgs: no buffer is copied to call a kernel); a kernel only reads them, and they
// may alias one another.
using CpuKernelFn = Tensors (*)(const TensorArgs& inputs, const Attrs& attrs);

namespace cpu {
#define SPMD_DECLARE_CPU_KERNEL(name) Tensors name(const TensorArgs& inputs, const Attrs& attrs);
SPMD_FOR_EACH_OP(SPMD_DECLARE_CPU_KERNEL)
#undef SPMD_DECLARE_CPU_KERNEL
// The phases of the ops with an exchange inside (OpDecl::exchange), found by FindCpuKernel
// as KernelRef{op, Phase::kStats} and KernelRef{op, Phase::kFinish}.
// The softmax cross entropies' phases are in loss.cc, the other row reductions' (whose
// reduced axis may stay sharded) in norm_exchange.cc.
#define SPMD_DECLARE_CPU_EXCHANGE_PHASES(name)                        \
  Tensors name##_stats(const TensorArgs& inputs, const Attrs& attrs); \
  Tensors name##_finish(const TensorArgs& inputs, const Attrs& attrs);
SPMD_FOR_EACH_EXCHANGE_OP(SPMD_DECLARE_CPU_EXCHANGE_PHASES)
#undef SPMD_DECLARE_CPU_EXCHANGE_PHASES
}  // namespace cpu

// Returns the CPU kernel of an op (a name) or of one phase of its exchange
// (KernelRef{op, phase}), or nullptr when spmdkit has no such op or phase. The kernel itself
// takes float64, float32, int64 and bool; RunCpuKernel adds the 2-byte floats.
CpuKernelFn FindCpuKernel(const KernelRef& kernel);

// True when the op (or phase) has a CPU kernel (every op of rules/engine/op_list.h has one: the table is
// generated from the list, so a missing kernel does not link).
bool HasCpuKernel(const KernelRef& kernel);

// Runs the CPU kernel of an op (a name) or of one phase of its exchange. Throws
// SpmdError(kUnknownOp, "op") for an op or phase spmdkit does not have, and SpmdError naming the field for inputs or attrs the op cannot take.
// bfloat16 / float16 inputs are computed in float32: converted exactly, the float32 kernel
// run, its float32 outputs rounded once (to nearest even) to the inputs' 2-byte dtype;
// other outputs (int64, bool, cast's attrs.dtype) are as the kernel gives them. A 2-byte
// float input next to another floating dtype is InvalidArgument ("inputs[i].dtype").
Tensors RunCpuKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs);
// The same on a braced list of the caller's tensors, RunCpuKernel(op, {x, y}, attrs), by
// reference (an initializer_list conversion ranks first; nothing is copied).
inline Tensors RunCpuKernel(const KernelRef& kernel,
                            std::initializer_list<std::reference_wrapper<const Tensor>> inputs,
                            const Attrs& attrs) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  return RunCpuKernel(kernel, TensorArgs(std::move(ptrs)), attrs);
}

}  // namespace spmd::kernels
