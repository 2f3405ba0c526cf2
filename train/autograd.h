// Reverse-mode autograd over Dispatch.
//
// A Variable is a DistTensor that may take part in a gradient computation. `Apply` runs a
// registered op on Variables through runtime::Dispatch (rule -> reshard -> kernel); when
// gradients are enabled (no NoGradGuard alive on this thread) and an input requires grad,
// it records the call: the op, its attrs, its input Variables and its output values.
// `Backward(loss, comm)` walks the recorded calls from `loss` back to the leaves, in
// reverse creation order, and runs each op's backward, which is data declared next to its
// rule (OpDecl::vjp, rules/engine/vjp.h): a small graph of calls to registered ops. Each of those
// calls goes through Dispatch too, so gradients are sharded by the same proven rules and
// the planner inserts the reshards they need. Nothing per op is written here.
//
// What a gradient looks like: a DistTensor on the leaf's mesh with whatever dist attr the
// backward's rules produce. The gradient of a weight that is replicated over a mesh axis
// along which the batch is sharded comes out partial(sum) over that axis, and stays
// partial: reducing it is a reshard, and which reshard is the parallel strategy's choice
// (to the weight's own placement: an all-reduce, data parallelism; to a sharded placement:
// a reduce-scatter, ZeRO-2). `Gradient(param, to, comm)` does that reshard.
//
// Gradients accumulate: a second Backward adds into the leaves' gradients (micro-batches)
// until ZeroGrad. The loss's cotangent is 1 (a replicated tensor of ones, the loss's shape;
// for a non-scalar loss that is the gradient of the sum of its elements).
//
// Every rank of the mesh must run the same program: Apply, Backward and Gradient are
// collective in the way Dispatch is. Ranks outside a tensor's mesh take part with Absent
// tensors, as in Dispatch.
//
// Example (y = sum(x @ w), 2 ranks, x batch-sharded, w replicated):
//   Variable x(DistTensor::ShardTensor(xg, mesh, Parse("[S(0)]"), rank));
//   Variable w(DistTensor::ShardTensor(wg, mesh, Parse("[R]"), rank), /*requires_grad=*/true);
//   Variable y = Apply1("sum", {Apply1("matmul", {x, w}, {}, comm)}, {}, comm);
//   Backward(y, comm);
//   DistTensor dw = Gradient(w, w.value().dist_attr(), comm);  // all-reduced: [R]
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/model/mesh.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"

namespace spmd::train {

using Shape = std::vector<int64_t>;

struct Node;

// The backward of a step recorded by ApplyFunction: given one cotangent per output, laid
// out exactly as that output (zeros where no gradient reached it), returns one entry per
// input: its gradient (any layout on the input's mesh with the input's shape and dtype),
// or nothing where the input gets none.
using BackwardFunction = std::function<std::vector<std::optional<runtime::DistTensor>>(
    const std::vector<runtime::DistTensor>& cotangents, runtime::Communicator& comm)>;

class Variable;
// A checkpointed region's computation (Checkpoint): outputs from inputs, through Apply and
// the like; it may read other variables (parameters) it captures.
using Region = std::function<std::vector<Variable>(const std::vector<Variable>& inputs,
                                                   runtime::Communicator& comm)>;
// How an ApplyFunction's backward is given its cotangents: kOutputs (the default), each
// resharded to its output's own layout first; kAsArrived, in whatever layout the backward of
// the output's users produced (a partial sum stays partial; zeros laid out as the output
// where none arrived), for a function that must see a gradient before it is reduced (a
// cast that widens a compute-dtype gradient before it meets a collective, train/precision.h).
enum class CotangentLayout { kOutputs, kAsArrived };

class Variable {
 public:
  // An empty variable (no value); most operations on it throw InvalidArgument.
  Variable() = default;
  // A leaf holding `value`. A leaf that requires grad accumulates a gradient in Backward.
  explicit Variable(runtime::DistTensor value, bool requires_grad = false);

  bool defined() const { return node_ != nullptr; }
  const runtime::DistTensor& value() const;
  bool requires_grad() const;
  // Whether no recorded call produced it (created by the constructor or Detach).
  bool is_leaf() const;

  // The gradient accumulated by Backward so far, as the backward's rules laid it out
  // (possibly partial); nothing before the first Backward reaching it. Leaves only.
  const std::optional<runtime::DistTensor>& grad() const;
  // Forgets the accumulated gradient (the next Backward starts from zero).
  void ZeroGrad() const;
  // Replaces the accumulated gradient of a leaf that requires grad (a data-parallel join
  // writes the averaged gradient back, train/join.h). InvalidArgument ("grad") unless
  // `grad` has the value's shape, dtype and mesh.
  void SetGrad(runtime::DistTensor grad) const;
  // Where Backward puts this leaf's gradient: each contribution is resharded to `layout`
  // as it arrives, before it is added (ZeRO-2: a reduce-scatter during the backward, so
  // the rank holds 1/N of the gradient). Without one (the default) contributions keep the
  // layout the backward's rules give them, partial included, until Gradient reduces them.
  // InvalidArgument ("grad_layout") when `layout` is not valid for the value's shape and mesh.
  void set_grad_layout(const DistAttr& layout) const;

  // Replaces the value of a leaf in place (an optimizer step; references value() gave
  // before are invalidated); the dist attr, mesh, shape
  // and dtype must stay the same (InvalidArgument "value" otherwise). The recorded graph
  // of earlier steps keeps the old value.
  void SetValue(runtime::DistTensor value) const;

  // The same value as a new leaf that does not require grad: gradients stop here.
  Variable Detach() const;

  // Identity of the underlying node (two copies of a Variable are the same variable).
  const Node* node() const { return node_.get(); }

 private:
  friend std::vector<Variable> Apply(std::string_view, const std::vector<Variable>&,
                                     const Attrs&, runtime::Communicator&);
  friend void Backward(const Variable&, runtime::Communicator&);
  friend void Backward(const Variable&, const runtime::DistTensor&, runtime::Communicator&);
  friend Variable Redistribute(const Variable&, const DistAttr&, runtime::Communicator&);
  friend std::vector<Variable> ApplyFunction(std::string, const std::vector<Variable>&,
                                             std::vector<runtime::DistTensor>, BackwardFunction,
                                             CotangentLayout);
  friend runtime::DistTensor Gradient(const Variable&, const DistAttr&, runtime::Communicator&);
  friend struct Recorder;  // train/autograd.cc: wraps a step's outputs as Variables
  explicit Variable(std::shared_ptr<Node> node) : node_(std::move(node)) {}
  std::shared_ptr<Node> node_;
};

// Runs the registered op `op` on the inputs' values through runtime::Dispatch and, when
// gradients are enabled and some input requires grad, records the call for Backward.
// Throws what Dispatch throws; SpmdError(kInvalidArgument, "inputs[i]") for an empty
// variable; SpmdError(kUnsupported, "op") when an input requires grad and the op has no
// declared backward (OpDecl::vjp).
std::vector<Variable> Apply(std::string_view op, const std::vector<Variable>& inputs,
                            const Attrs& attrs, runtime::Communicator& comm);
// The same for an op with one output.
Variable Apply1(std::string_view op, const std::vector<Variable>& inputs, const Attrs& attrs,
                runtime::Communicator& comm);

// `x` laid out as `to` on its mesh (DistTensor::Reshard), as a recorded step: its backward
// reshards the cotangent to the layout `x` had (partial axes dropped): the value is the
// same, only the layout moved, so the backward undoes the move (the transpose of an
// all-gather is a reduce-scatter).
// This is how a layout asks for a specific collective in the forward, e.g. a ZeRO-3
// parameter all-gathered before use: the rules alone might shard the contraction instead.
Variable Redistribute(const Variable& x, const DistAttr& to, runtime::Communicator& comm);

// A recorded step whose forward the caller has already computed and whose backward is a
// given function: for a computation that is not one registered op, such as a parallel
// strategy's own communication pattern (ring attention, train/sequence_attention.h).
// `outputs` are the values computed from the inputs' values; each becomes a Variable that
// requires grad when gradients are enabled and some input requires grad, and then
// Backward calls `backward` (collectively, as for any recorded call: every rank of the
// mesh runs it) with the cotangents resharded to the outputs' own layouts. `name` appears
// in error messages. Throws InvalidArgument ("inputs[i]") for an empty variable,
// ("backward") for an empty function, and, during Backward, ("backward") when the function
// returns a count other than the number of inputs or a gradient whose shape or dtype is
// not its input's.
// `cotangent_layout`: see CotangentLayout.
std::vector<Variable> ApplyFunction(std::string name, const std::vector<Variable>& inputs,
                                    std::vector<runtime::DistTensor> outputs,
                                    BackwardFunction backward,
                                    CotangentLayout cotangent_layout = CotangentLayout::kOutputs);

// Activation recompute: `region(inputs)` run now without recording its intermediates, and
// recorded as one step that keeps only its inputs and outputs. Its backward runs `region`
// again on the inputs' values, recorded this time, and backpropagates the cotangents
// through that graph (as they arrive, not resharded), which is then freed: the parameters
// the region reads receive their gradients there, the inputs theirs through the step. The
// region must compute the same values both times (a dropout mask from a seed it captures,
// not from a generator that advances): then every gradient is bitwise what the recorded
// region gives, because the same calls run in the same order on the same values.
// With gradients disabled, `region(inputs)` itself. With them enabled the step is recorded
// even when no input requires grad (the region may read parameters that do). Throws
// InvalidArgument ("inputs[i]") for an empty variable, ("region") for an empty function
// and, during Backward, when the region returns another number of outputs.
std::vector<Variable> Checkpoint(std::string name, const std::vector<Variable>& inputs, Region region,
                                 runtime::Communicator& comm);

// The bytes of activations this thread holds: the local shards of every output of a
// recorded step (Apply, Redistribute, ApplyFunction, Checkpoint) from its creation until
// the last reference to it (the graph, a Variable) is gone and its buffer freed. `peak`:
// the most at once since the thread started or ResetActivationPeak. A measurement of the
// buffers themselves (each tensor owns its buffer), not an estimate; gradients, parameters
// and the transient values of unrecorded calls are not activations and are not counted.
struct ActivationMemory {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
};
ActivationMemory ActivationBytes();
void ResetActivationPeak();  // peak := live, on this thread

// Computes the gradient of `loss` (cotangent: ones) with respect to every leaf that
// requires grad and is reachable from it, adding it to the leaf's grad(). Frees the
// recorded calls it ran through (a second Backward over the same graph throws
// InvalidArgument "loss": record the forward again). Throws
// SpmdError(kInvalidArgument, "loss") when `loss` does not require grad.
void Backward(const Variable& loss, runtime::Communicator& comm);
// The same with the cotangent of `output` given: the vector-Jacobian product of
// `cotangent` (any dist attr on the output's mesh, the output's shape and dtype;
// InvalidArgument "cotangent" otherwise) with every leaf reachable from `output`. How a
// pipeline stage runs its backward from the gradient the next stage sent.
void Backward(const Variable& output, const runtime::DistTensor& cotangent,
              runtime::Communicator& comm);

// The accumulated gradient of `leaf` resharded to `to` (the partial axes reduced, the dims
// laid out as `to` says), or zeros laid out as `to` when Backward never reached it. Throws
// InvalidArgument ("leaf") for a variable that is not a leaf requiring grad.
runtime::DistTensor Gradient(const Variable& leaf, const DistAttr& to, runtime::Communicator& comm);

// While alive, Apply records nothing on this thread (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Whether Apply records on this thread (false inside a NoGradGuard).
bool GradEnabled();

// A DistTensor of `value` everywhere, with `attr` (its partial axes are dropped: a
// constant is not an addend), on `mesh` as seen by `process_id`, its shard on `device`
// ordered on `stream` (the fill is queued there, not waited for).
runtime::DistTensor Constant(const Shape& shape, DType dtype, const Mesh& mesh,
                             const DistAttr& attr, int64_t process_id, double value,
                             kernels::Device device = {}, kernels::Stream stream = {});
// The same with `like`'s shape, dtype, mesh and process id, on the device and stream of
// its shard (the host outside the mesh).
runtime::DistTensor ConstantLike(const runtime::DistTensor& like, const DistAttr& attr, double value);

}  // namespace spmd::train
