#include "runtime/dispatch.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "rules/error.h"
#include "rules/layout.h"
#include "rules/registry.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using kernels::Tensors;

std::string Field(const char* what, size_t i) { return std::string(what) + "[" + std::to_string(i) + "]"; }

DType PlaceholderDType(const std::vector<const DistTensor*>& inputs) {
  for (const DistTensor* t : inputs) {
    if (IsFloating(t->dtype())) return t->dtype();
  }
  return DType::kFloat64;
}

// The Backend of the local shards' device (the host when there are none). Throws
// InvalidArgument ("inputs[i].device") when the shards are on different devices.
kernels::Backend& LocalBackend(const kernels::TensorArgs& locals) {
  const kernels::Device device = locals.empty() ? kernels::Device::Host() : locals[0].device();
  for (size_t i = 1; i < locals.size(); ++i) {
    if (locals[i].device() != device) {
      ThrowInvalid(Field("inputs", i) + ".device", "is on " + kernels::ToString(locals[i].device()) +
                                                       ", inputs[0] on " + kernels::ToString(device));
    }
  }
  return kernels::BackendFor(device);
}

// Dispatch on the caller's tensors, by pointer (none is copied).
std::vector<DistTensor> DispatchOn(const OpDecl& op, const std::vector<const DistTensor*>& inputs,
                                   const Attrs& attrs, Communicator& comm, DispatchReport* report) {
  const int64_t me = comm.rank();
  if (inputs.empty()) ThrowInvalid("inputs", "no inputs");
  const Mesh& mesh = inputs[0]->mesh();
  std::vector<TensorArg> args;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!(inputs[i]->mesh() == mesh)) {
      ThrowInvalid(Field("inputs", i) + ".mesh", "is " + ToString(inputs[i]->mesh()) +
                                                      ", inputs[0] is on " + ToString(mesh));
    }
    if (inputs[i]->process_id() != me) {
      ThrowInvalid(Field("inputs", i), "belongs to rank " + std::to_string(inputs[i]->process_id()) +
                                           ", the communicator to rank " + std::to_string(me));
    }
    args.push_back({inputs[i]->shape(), inputs[i]->dist_attr()});
    shapes.push_back(inputs[i]->shape());
  }
  // One pass gives the rule, the normalised attrs and every output shape (the declaration
  // gives them before any kernel runs).
  const ForwardInference inferred = InferForwardWithShapes(op, mesh, args, attrs);
  const InferResult& rule = inferred.rule;
  const Attrs& normalized = inferred.normalized;
  if (report != nullptr) {
    *report = DispatchReport{};
    report->rule = rule;
    report->resharded.assign(inputs.size(), false);
    report->reshards.resize(inputs.size());
  }

  // Reshard the inputs that need it (a no-op on ranks outside the mesh). The kernel reads
  // the others from the caller's shards: `locals` points at inputs[i]->local() for them and
  // at an entry of `resharded` for the rest (reserved for every input before the first
  // entry, so its elements never move; an empty vector allocates nothing, as a deque did).
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(me);
  std::vector<Tensor> resharded;
  std::vector<const Tensor*> local_ptrs;
  std::vector<Shape> local_shapes, offsets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool move = !(inputs[i]->dist_attr() == rule.inputs[i]);
    ReshardReport* r = report != nullptr ? &report->reshards[i] : nullptr;
    if (report != nullptr) report->resharded[i] = move;
    if (!coord) continue;
    if (move) {
      DistTensor ready = inputs[i]->Reshard(rule.inputs[i], comm, r);
      if (resharded.capacity() == 0) resharded.reserve(inputs.size());
      resharded.push_back(std::move(ready.local()));
      local_ptrs.push_back(&resharded.back());
    } else {
      local_ptrs.push_back(&inputs[i]->local());
    }
    if (op.localize) {  // only a localizer reads the local shapes and offsets
      local_shapes.push_back(local_ptrs.back()->shape());
      offsets.push_back(GlobalOffset(shapes[i], rule.inputs[i], mesh, *coord));
    }
  }
  const kernels::TensorArgs locals(std::move(local_ptrs));

  const std::vector<Shape>& global_out = inferred.output_shapes;
  if (global_out.size() != rule.outputs.size()) {
    throw std::logic_error("the rule of " + op.name + " gives " + std::to_string(rule.outputs.size()) +
                           " output dist attrs for " + std::to_string(global_out.size()) + " outputs");
  }
  if (!coord) {
    std::vector<DistTensor> out;
    for (size_t o = 0; o < global_out.size(); ++o) {
      out.push_back(DistTensor::Absent(global_out[o], PlaceholderDType(inputs), mesh,
                                       rule.outputs[o], me));
    }
    return out;
  }

  Attrs local_attrs = normalized;
  if (op.localize) {
    std::vector<Shape> local_out;
    for (size_t o = 0; o < global_out.size(); ++o) {
      local_out.push_back(LocalShape(global_out[o], rule.outputs[o], mesh, *coord));
    }
    const LocalContext context{normalized, shapes, local_shapes, offsets, global_out, local_out};
    local_attrs = op.localize(context);
  }
  if (report != nullptr) {
    report->local_attrs = local_attrs;
    for (const Tensor& t : locals) report->input_buffers.push_back(t.bytes());
  }

  Tensors results = LocalBackend(locals).RunKernel(op.name, locals, local_attrs);
  if (results.size() != global_out.size()) {
    throw std::logic_error(op.name + ": the kernel gave " + std::to_string(results.size()) +
                           " outputs, the declaration " + std::to_string(global_out.size()));
  }
  std::vector<DistTensor> out;
  for (size_t o = 0; o < results.size(); ++o) {
    const Shape want = LocalShape(global_out[o], rule.outputs[o], mesh, *coord);
    if (results[o].shape() != want) {
      throw std::logic_error(op.name + ": output " + std::to_string(o) + " on rank " +
                             std::to_string(me) + " has local shape " +
                             kernels::ShapeToString(results[o].shape()) + ", the layout gives " +
                             kernels::ShapeToString(want) + " (global " +
                             kernels::ShapeToString(global_out[o]) + ")");
    }
    const DType dtype = results[o].dtype();
    out.push_back(DistTensor::FromLocal(std::move(results[o]), global_out[o], dtype, mesh,
                                        rule.outputs[o], me));
  }
  return out;
}

// The addresses of the caller's tensors (a vector of them, or DistTensorRefs).
template <typename Range>
std::vector<const DistTensor*> Pointers(const Range& inputs) {
  std::vector<const DistTensor*> out;
  out.reserve(inputs.size());
  for (const DistTensor& t : inputs) out.push_back(&t);
  return out;
}

const OpDecl& FindOrThrow(std::string_view op) {
  const OpDecl* decl = FindOp(op);
  if (decl == nullptr) {
    throw SpmdError(ErrorType::kUnknownOp, "op", "no op named '" + std::string(op) + "'");
  }
  return *decl;
}

}  // namespace

std::vector<DistTensor> Dispatch(const OpDecl& op, const std::vector<DistTensor>& inputs,
                                 const Attrs& attrs, Communicator& comm, DispatchReport* report) {
  return DispatchOn(op, Pointers(inputs), attrs, comm, report);
}

std::vector<DistTensor> Dispatch(const OpDecl& op, DistTensorRefs inputs, const Attrs& attrs,
                                 Communicator& comm, DispatchReport* report) {
  return DispatchOn(op, Pointers(inputs), attrs, comm, report);
}

std::vector<DistTensor> Dispatch(const OpDecl& op, const std::vector<const DistTensor*>& inputs,
                                 const Attrs& attrs, Communicator& comm, DispatchReport* report) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) ThrowInvalid(Field("inputs", i), "a null tensor pointer");
  }
  return DispatchOn(op, inputs, attrs, comm, report);
}

std::vector<DistTensor> Dispatch(std::string_view op, const std::vector<DistTensor>& inputs,
                                 const Attrs& attrs, Communicator& comm, DispatchReport* report) {
  return DispatchOn(FindOrThrow(op), Pointers(inputs), attrs, comm, report);
}

std::vector<DistTensor> Dispatch(std::string_view op, DistTensorRefs inputs, const Attrs& attrs,
                                 Communicator& comm, DispatchReport* report) {
  return DispatchOn(FindOrThrow(op), Pointers(inputs), attrs, comm, report);
}

}  // namespace spmd::runtime
