// Dispatch: runs any registered op on DistTensors (docs/ARCHITECTURE.md "Runtime shape": rule ->
// reshard -> kernel).
//
// Dispatch(op, inputs, attrs, comm), on every rank of the inputs' mesh:
// 1. the rule: InferForward(op, mesh, {shape, dist attr} of each input, attrs) gives the
//    required input dist attrs and the output dist attrs;
// 2. each input whose dist attr differs from the required one is resharded to it
//    (PlanReshard's plan, run by the executor);
// 3. the local kernel, run by the Backend of the shards' device
//    (kernels::BackendFor(device).RunKernel(op, local shards, attrs); all shards on one
//    device, InvalidArgument "inputs[i].device" otherwise), with the attrs the
//    op's localizer derives for this rank (LocalContext: global and local shapes of inputs
//    and outputs, the global offset of every input shard; as checker/simulate.cc does).
//    The kernel reads an input that needed no reshard from the caller's own shard
//    (inputs[i].local(), not a copy; kernels take a kernels::TensorArgs) and a resharded
//    one from the reshard's result;
// 4. the outputs are DistTensors with the inferred dist attrs; partial outputs stay
//    partial until someone reshards them.
//
// Global output shapes (needed by localizers before the kernel runs, and by the result)
// come from the declaration, InferOutputShapes (rules/engine/op_decl.h): an einsum factor's size
// or the DimTrans output shape (Dispatch takes them, with the rule and the normalised
// attrs, from one InferForwardWithShapes call). No kernel runs to learn them, except a
// data-dependent dim (kDataDependentDim: nonzero's count, unique's number of distinct
// values), whose size is what the kernel gave: such an output is replicated (the rule never
// shards or makes partial a data-dependent dim), so its local shape is its global shape. Its
// static dims must be the declaration's (else std::logic_error), and the ranks of the mesh
// all-gather their sizes and compare them: a rank whose size differs (the replicated inputs
// differ between ranks) makes every rank throw InvalidArgument ("outputs[o].shape"). A
// localizer sees kDataDependentDim at such a dim. Every kernel output is checked against the
// layout: its local shape must be LocalShape(global shape, output dist attr, mesh, coord),
// else std::logic_error.
//
// Ranks outside the mesh do nothing: they get outputs without a buffer, with the inferred
// dist attrs and the declared global shapes (dtype: that of the first floating input,
// else float64); they never learn a data-dependent size, which stays kDataDependentDim.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/engine/op_decl.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/exec/reshard_executor.h"

namespace spmd::runtime {

struct DispatchReport {
  InferResult rule;                     // required input and output dist attrs
  std::vector<bool> resharded;          // per input: whether it was resharded
  std::vector<ReshardReport> reshards;  // per input: the bytes its reshard moved
  Attrs local_attrs;                    // the attrs the kernel ran with on this rank
  // Per input, on ranks of the mesh (empty elsewhere): the buffer (bytes()) of the tensor
  // the kernel was given. It is inputs[i].local().bytes() for an input that needed no
  // reshard (no copy) and the reshard's result otherwise, which is freed when Dispatch
  // returns: compare these pointers, never read through them. nullptr for an empty shard.
  std::vector<const std::byte*> input_buffers;
};

// A braced list of the caller's DistTensors, by reference: `Dispatch("matmul", {x, w}, ...)`
// picks the overloads taking it (an initializer_list conversion ranks first) and copies
// neither tensor. A list holding a temporary falls back to the std::vector overloads.
using DistTensorRefs = std::initializer_list<std::reference_wrapper<const DistTensor>>;

// Runs `op` on `inputs` (all on one mesh, all of this rank: process_id() == comm.rank()).
// Throws SpmdError as InferForward does (naming the field), SpmdError(kInvalidArgument,
// "inputs[i].mesh") when the meshes differ, and what the kernel throws.
std::vector<DistTensor> Dispatch(const OpDecl& op, const std::vector<DistTensor>& inputs,
                                 const Attrs& attrs, Communicator& comm,
                                 DispatchReport* report = nullptr);
std::vector<DistTensor> Dispatch(const OpDecl& op, DistTensorRefs inputs, const Attrs& attrs,
                                 Communicator& comm, DispatchReport* report = nullptr);
// Inputs by pointer (none null: InvalidArgument "inputs[i]"): for callers that hold their
// tensors elsewhere, such as autograd, and must not copy them into a vector.
std::vector<DistTensor> Dispatch(const OpDecl& op, const std::vector<const DistTensor*>& inputs,
                                 const Attrs& attrs, Communicator& comm,
                                 DispatchReport* report = nullptr);
// By name; SpmdError(kUnknownOp, "op") for a name spmdkit does not have.
std::vector<DistTensor> Dispatch(std::string_view op, const std::vector<DistTensor>& inputs,
                                 const Attrs& attrs, Communicator& comm,
                                 DispatchReport* report = nullptr);
std::vector<DistTensor> Dispatch(std::string_view op, DistTensorRefs inputs, const Attrs& attrs,
                                 Communicator& comm, DispatchReport* report = nullptr);

}  // namespace spmd::runtime
