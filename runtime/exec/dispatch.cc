#include "runtime/exec/dispatch.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/phase.h"
#include "rules/engine/registry.h"
#include "runtime/comm/host_values.h"
#include "runtime/exec/rule_cache.h"

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

// The local program of an op with an exchange inside (OpDecl::exchange): its Phase::kStats
// on this rank's shards, an all-gather of its output over the mesh axes that shard the
// exchanged dim (members in Mesh::GroupOf order, the pieces stacked on a new leading dim),
// then its Phase::kFinish on the shards and the gathered tensor. Every member computes the same
// statistics' shape (the other dims are sharded alike within the group), so the counts
// agree; a bad label is found by every member in the finish phase alike, so none waits.
Tensors RunExchange(const OpDecl& op, const RuleContext& context, const Mesh& mesh,
                    const std::vector<int64_t>& coord, const std::vector<DistAttr>& required,
                    const kernels::TensorArgs& locals, const Attrs& attrs, Communicator& comm) {
  kernels::Backend& backend = LocalBackend(locals);
  const KernelRef stats_phase(op.name, Phase::kStats);
  Tensors stats = backend.RunKernel(stats_phase, locals, attrs);
  if (stats.size() != 1) throw std::logic_error(ToString(stats_phase) + " must give one tensor");
  const std::vector<int>& axes = required[op.exchange->input].dims[ExchangedDim(op, context)];
  const std::vector<int64_t> group = mesh.GroupOf(coord, axes);
  Shape shape = stats[0].shape();
  shape.insert(shape.begin(), static_cast<int64_t>(group.size()));
  Tensor gathered = Tensor::Uninitialized(shape, stats[0].dtype(), backend.AllocatorFor(stats[0].device()),
                                         stats[0].stream());
  const std::vector<int64_t> counts(group.size(), stats[0].numel());
  if (group.size() == 1) {
    backend.Copy(gathered.bytes(), stats[0].bytes(), stats[0].nbytes(), stats[0].stream());
  } else {
    comm.AllGather(stats[0].bytes(), gathered.bytes(), counts, stats[0].dtype(), group);
  }
  std::vector<const Tensor*> finish_inputs;
  for (const Tensor& t : locals) finish_inputs.push_back(&t);
  finish_inputs.push_back(&gathered);
  return backend.RunKernel(KernelRef(op.name, Phase::kFinish), kernels::TensorArgs(std::move(finish_inputs)), attrs);
}

// The sizes this rank's kernel gave at the data-dependent dims of its outputs (in output,
// then dim order), gathered from every rank of the mesh and compared: the outputs holding
// them are replicated and every rank ran the same kernel on the same replicated inputs, so
// the sizes agree unless those inputs differ between ranks (a caller's replicated tensor
// that is not the same everywhere, or a reduction that rounds differently per rank). Every
// rank sees the same gathered list, so all of them throw alike (none waits for another):
// InvalidArgument ("outputs[o].shape") naming the two ranks and their sizes.
void AgreeOnDataDependentSizes(const OpDecl& op, const std::vector<Shape>& declared, const Tensors& results,
                               const Mesh& mesh, const std::vector<int64_t>& coord, Communicator& comm) {
  std::vector<int64_t> mine;
  std::vector<std::pair<size_t, size_t>> where;  // (output, dim) of each entry
  for (size_t o = 0; o < declared.size(); ++o) {
    for (size_t d = 0; d < declared[o].size(); ++d) {
      if (declared[o][d] != kDataDependentDim) continue;
      mine.push_back(results[o].shape()[d]);
      where.push_back({o, d});
    }
  }
  std::vector<int> all_axes;
  for (int a = 0; a < mesh.ndim(); ++a) all_axes.push_back(a);
  const std::vector<int64_t> group = mesh.GroupOf(coord, all_axes);
  if (mine.empty() || group.size() < 2) return;
  std::vector<int64_t> gathered(mine.size() * group.size());
  const std::vector<int64_t> counts(group.size(), static_cast<int64_t>(mine.size()));
  HostAllGather(mine.data(), gathered.data(), counts, group, comm);
  for (size_t member = 1; member < group.size(); ++member) {
    for (size_t k = 0; k < mine.size(); ++k) {
      const int64_t first = gathered[k];
      const int64_t other = gathered[member * mine.size() + k];
      if (first == other) continue;
      ThrowInvalid(Field("outputs", where[k].first) + ".shape",
                   op.name + "'s data-dependent dim " + std::to_string(where[k].second) + " has size " +
                       std::to_string(first) + " on rank " + std::to_string(group[0]) + " and " +
                       std::to_string(other) + " on rank " + std::to_string(group[member]) +
                       ": its replicated inputs differ between the ranks");
    }
  }
}

// Dispatch on the caller's tensors, by pointer (none is copied).
std::vector<DistTensor> DispatchOn(const OpDecl& op, const std::vector<const DistTensor*>& inputs,
                                   const Attrs& attrs, Communicator& comm, DispatchReport* report) {
  const int64_t me = comm.rank();
  if (inputs.empty()) ThrowInvalid("inputs", "no inputs");
  const Mesh& mesh = inputs[0]->mesh();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!(inputs[i]->mesh() == mesh)) {
      ThrowInvalid(Field("inputs", i) + ".mesh", "is " + ToString(inputs[i]->mesh()) +
                                                      ", inputs[0] is on " + ToString(mesh));
    }
    if (inputs[i]->process_id() != me) {
      ThrowInvalid(Field("inputs", i), "belongs to rank " + std::to_string(inputs[i]->process_id()) +
                                           ", the communicator to rank " + std::to_string(me));
    }
  }
  // One pass gives the rule, the normalised attrs and every output shape (the declaration
  // gives them before any kernel runs); a request seen before on this thread is answered
  // from the rule cache (runtime/exec/rule_cache.h).
  const std::shared_ptr<const ForwardInference> answer = CachedInferForward(op, mesh, inputs, attrs);
  const ForwardInference& inferred = *answer;
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
      offsets.push_back(GlobalOffset(inputs[i]->shape(), rule.inputs[i], mesh, *coord));
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

  // The global input shapes, for a localizer or an exchange (copied only for those).
  std::vector<Shape> shapes;
  if (op.localize || op.exchange) {
    for (const DistTensor* t : inputs) shapes.push_back(t->shape());
  }
  // The kernel's attrs: the normalised ones, or what the localizer makes of them.
  Attrs localized;
  if (op.localize) {
    std::vector<Shape> local_out;
    for (size_t o = 0; o < global_out.size(); ++o) {
      local_out.push_back(LocalShape(global_out[o], rule.outputs[o], mesh, *coord));
    }
    const LocalContext context{normalized, shapes, local_shapes, offsets, global_out, local_out};
    localized = op.localize(context);
  }
  const Attrs& local_attrs = op.localize ? localized : normalized;
  if (report != nullptr) {
    report->local_attrs = local_attrs;
    for (const Tensor& t : locals) report->input_buffers.push_back(t.bytes());
  }

  // The exchange runs when its dim is sharded; whole, the gather would be of this piece
  // alone, and the op's own kernel gives the same values (on a device, its device kernel).
  const int exchange_dim = ExchangedDim(op, RuleContext{shapes, normalized});
  const bool exchange = exchange_dim >= 0 && !rule.inputs[op.exchange->input].dims[exchange_dim].empty();
  Tensors results = exchange ? RunExchange(op, RuleContext{shapes, normalized}, mesh, *coord,
                                           rule.inputs, locals, local_attrs, comm)
                             : LocalBackend(locals).RunKernel(op.name, locals, local_attrs);
  if (results.size() != global_out.size()) {
    throw std::logic_error(op.name + ": the kernel gave " + std::to_string(results.size()) +
                           " outputs, the declaration " + std::to_string(global_out.size()));
  }
  // A data-dependent dim (nonzero's count) takes the size the kernel gave: its output is
  // replicated (the rule never shards or makes partial such an output), so the local shape
  // is the global one; the static dims must be the declaration's, and every rank's sizes
  // must agree.
  std::vector<Shape> run_shapes;
  for (size_t o = 0; o < results.size(); ++o) {
    if (!HasDataDependentDim(global_out[o])) continue;
    if (run_shapes.empty()) run_shapes = global_out;
    if (!ShapeFits(global_out[o], results[o].shape())) {
      throw std::logic_error(op.name + ": output " + std::to_string(o) + " on rank " + std::to_string(me) +
                             " has shape " + kernels::ShapeToString(results[o].shape()) + ", the declaration gives " +
                             kernels::ShapeToString(global_out[o]) + " (" + std::to_string(kDataDependentDim) +
                             ": data-dependent)");
    }
    run_shapes[o] = results[o].shape();
  }
  if (!run_shapes.empty()) AgreeOnDataDependentSizes(op, global_out, results, mesh, *coord, comm);
  const std::vector<Shape>& global_shapes = run_shapes.empty() ? global_out : run_shapes;
  std::vector<DistTensor> out;
  out.reserve(results.size());
  for (size_t o = 0; o < results.size(); ++o) {
    const Shape& global = global_shapes[o];
    const Shape want = LocalShape(global, rule.outputs[o], mesh, *coord);
    if (results[o].shape() != want) {
      throw std::logic_error(op.name + ": output " + std::to_string(o) + " on rank " +
                             std::to_string(me) + " has local shape " +
                             kernels::ShapeToString(results[o].shape()) + ", the layout gives " +
                             kernels::ShapeToString(want) + " (global " +
                             kernels::ShapeToString(global) + ")");
    }
    // The rule's layout (valid on the mesh) and the shape just checked: nothing to check again.
    out.push_back(DistTensor::FromCheckedLocal(std::move(results[o]), global, mesh, rule.outputs[o], me,
                                               *coord));
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
