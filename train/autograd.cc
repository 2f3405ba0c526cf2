#include "train/autograd.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "kernels/backend.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"
#include "rules/engine/vjp.h"
#include "runtime/exec/dispatch.h"

namespace spmd::train {

using runtime::Communicator;
using runtime::DistTensor;

// One recorded call: what its backward needs.
struct GradFn {
  const OpDecl* op = nullptr;  // nullptr: Redistribute (identity), ApplyFunction or Checkpoint
  std::string name;            // ApplyFunction, Checkpoint: its name
  BackwardFunction custom;     // ApplyFunction: its backward
  Region region;               // Checkpoint: the region re-run in the backward
  bool as_arrived = false;     // ApplyFunction: CotangentLayout::kAsArrived
  Attrs attrs;                                         // normalised by the declaration
  std::vector<std::shared_ptr<Node>> inputs;           // the input variables
  // Their values when the call ran (a later SetValue on a leaf does not change them).
  std::vector<std::shared_ptr<const DistTensor>> input_values;
  std::vector<std::shared_ptr<const DistTensor>> outputs;  // the output values
  uint64_t sequence = 0;                               // creation order
  bool released = false;                               // Backward ran through it
};

struct Node {
  std::shared_ptr<const DistTensor> value;
  bool requires_grad = false;
  std::shared_ptr<GradFn> grad_fn;  // nullptr for a leaf
  size_t output_index = 0;          // which output of grad_fn this is
  std::optional<DistTensor> grad;   // leaves: the accumulated gradient
  std::optional<DistAttr> grad_layout;  // leaves: where contributions are resharded to
};

namespace {

// A copy of g whose shard shares g's buffer copy-on-write (kernels::Tensor::View) instead
// of copying its bytes: a write through either first gives the writer a buffer of its
// own, so neither ever sees the other's writes.
DistTensor Shared(const DistTensor& g) {
  if (!g.has_local()) return g;  // no buffer to copy
  const kernels::Tensor& local = g.local();
  return DistTensor::FromLocal(local.View(local.shape()), g.shape(), g.dtype(), g.mesh(),
                               g.dist_attr(), g.process_id());
}

thread_local bool grad_enabled = true;
std::atomic<uint64_t> next_sequence{0};

// The bytes of recorded steps' outputs alive on this thread (ActivationBytes). Shared with
// each counted tensor, so a tensor freed after its thread ended still has its counter.
struct ActivationCounter {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
};
const std::shared_ptr<ActivationCounter>& ThreadActivations() {
  thread_local const std::shared_ptr<ActivationCounter> counter = std::make_shared<ActivationCounter>();
  return counter;
}

// `value` as held by a recorded step: its local bytes count as live activations until the
// last reference to the returned pointer goes (the buffer is freed then: tensors own their
// buffers, kernels/tensor.h).
std::shared_ptr<const DistTensor> Counted(std::shared_ptr<const DistTensor> value) {
  struct Held {
    std::shared_ptr<const DistTensor> value;
    std::shared_ptr<ActivationCounter> counter;
    int64_t bytes = 0;
    ~Held() { counter->live -= bytes; }
  };
  auto held = std::make_shared<Held>();
  held->bytes = value->has_local() ? static_cast<int64_t>(value->local().nbytes()) : 0;
  held->counter = ThreadActivations();
  const int64_t live = held->counter->live += held->bytes;
  int64_t peak = held->counter->peak.load();
  while (live > peak && !held->counter->peak.compare_exchange_weak(peak, live)) {
  }
  held->value = std::move(value);
  const DistTensor* raw = held->value.get();
  return std::shared_ptr<const DistTensor>(std::move(held), raw);
}

const Node& Checked(const std::shared_ptr<Node>& node, const char* field) {
  if (!node) ThrowInvalid(field, "an empty Variable");
  return *node;
}

DistTensor Add(const DistTensor& a, const DistTensor& b, Communicator& comm) {
  return std::move(runtime::Dispatch("add", {a, b}, Attrs{}, comm)[0]);
}

DistAttr WithoutPartial(DistAttr attr) {
  attr.partial.clear();
  return attr;
}

}  // namespace

// ---- Variable -----------------------------------------------------------------------------

Variable::Variable(DistTensor value, bool requires_grad) : node_(std::make_shared<Node>()) {
  node_->value = std::make_shared<const DistTensor>(std::move(value));
  node_->requires_grad = requires_grad;
}

const DistTensor& Variable::value() const { return *Checked(node_, "variable").value; }

bool Variable::requires_grad() const { return Checked(node_, "variable").requires_grad; }

bool Variable::is_leaf() const { return Checked(node_, "variable").grad_fn == nullptr; }

const std::optional<DistTensor>& Variable::grad() const { return Checked(node_, "variable").grad; }

void Variable::ZeroGrad() const {
  Checked(node_, "variable");
  node_->grad.reset();
}

void Variable::SetGrad(DistTensor grad) const {
  const Node& node = Checked(node_, "variable");
  if (!node.requires_grad || node.grad_fn != nullptr) {
    ThrowInvalid("grad", "only a leaf that requires grad has one");
  }
  if (grad.shape() != node.value->shape() || grad.dtype() != node.value->dtype() ||
      !(grad.mesh() == node.value->mesh())) {
    ThrowInvalid("grad", "the gradient must have the value's shape, dtype and mesh");
  }
  node_->grad = std::move(grad);
}

void Variable::set_grad_layout(const DistAttr& layout) const {
  const Node& node = Checked(node_, "variable");
  Validate(layout, node.value->mesh(), static_cast<int>(node.value->shape().size()), "grad_layout");
  node_->grad_layout = layout;
}

void Variable::SetValue(DistTensor value) const {
  const Node& node = Checked(node_, "variable");
  const DistTensor& old = *node.value;
  if (node.grad_fn) ThrowInvalid("value", "SetValue on a variable that is not a leaf");
  if (value.shape() != old.shape() || value.dtype() != old.dtype() ||
      !(value.mesh() == old.mesh()) || !(value.dist_attr() == old.dist_attr())) {
    ThrowInvalid("value", "the new value must keep the shape, dtype, mesh and dist attr");
  }
  node_->value = std::make_shared<const DistTensor>(std::move(value));
}

Variable Variable::Detach() const { return Variable(value(), false); }

// ---- Grad mode ----------------------------------------------------------------------------

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }
bool GradEnabled() { return grad_enabled; }

ActivationMemory ActivationBytes() {
  const ActivationCounter& c = *ThreadActivations();
  return {c.live.load(), c.peak.load()};
}

void ResetActivationPeak() {
  ActivationCounter& c = *ThreadActivations();
  c.peak = c.live.load();
}

// ---- Constant -----------------------------------------------------------------------------

DistTensor Constant(const Shape& shape, DType dtype, const Mesh& mesh, const DistAttr& attr,
                    int64_t process_id, double value, kernels::Device device, kernels::Stream stream) {
  const DistAttr layout = WithoutPartial(attr);
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(process_id);
  if (!coord) return DistTensor::Absent(shape, dtype, mesh, layout, process_id);
  kernels::Backend& backend = kernels::BackendFor(device);
  kernels::Tensor local;
  if (device.is_host()) {
    local = kernels::Tensor(LocalShape(shape, layout, mesh, *coord), dtype);  // zeros
  } else {
    // Device memory comes uninitialised (the sim poisons it): fill every element.
    local = kernels::Tensor::Uninitialized(LocalShape(shape, layout, mesh, *coord), dtype,
                                           backend.AllocatorFor(device), stream);
  }
  if ((value != 0 || !device.is_host()) && local.numel() > 0) {
    backend.Fill(local.bytes(), local.numel(), dtype, value, local.stream());
    if (device.is_host()) backend.Synchronize(local.stream());
  }
  return DistTensor::FromLocal(std::move(local), shape, dtype, mesh, layout, process_id);
}

DistTensor ConstantLike(const DistTensor& like, const DistAttr& attr, double value) {
  const kernels::Device device = like.has_local() ? like.local().device() : kernels::Device::Host();
  const kernels::Stream stream = like.has_local() ? like.local().stream() : kernels::Stream{};
  return Constant(like.shape(), like.dtype(), like.mesh(), attr, like.process_id(), value, device, stream);
}

// ---- Apply --------------------------------------------------------------------------------

// What Apply, ApplyFunction and Redistribute share: a recorded step's node, and its
// outputs wrapped as Variables (Variable's node constructor is private to its friends).
struct Recorder {
  // A step reading `inputs`, numbered for Backward's order; the caller says what it is.
  static std::shared_ptr<GradFn> NewStep(const std::vector<Variable>& inputs) {
    auto fn = std::make_shared<GradFn>();
    for (const Variable& input : inputs) {
      fn->inputs.push_back(input.node_);
      fn->input_values.push_back(input.node_->value);
    }
    fn->sequence = next_sequence.fetch_add(1);
    return fn;
  }
  // The outputs as Variables; with a recorded step (fn), its floating outputs require grad
  // and point back at it (masks and indices carry no gradient).
  static std::vector<Variable> Wrap(std::vector<DistTensor> outputs,
                                    const std::shared_ptr<GradFn>& fn) {
    std::vector<Variable> result;
    result.reserve(outputs.size());
    for (size_t o = 0; o < outputs.size(); ++o) {
      auto node = std::make_shared<Node>();
      node->value = std::make_shared<const DistTensor>(std::move(outputs[o]));
      if (fn) node->value = Counted(std::move(node->value));
      if (fn && IsFloating(node->value->dtype())) {
        node->requires_grad = true;
        node->grad_fn = fn;
        node->output_index = o;
      }
      if (fn) fn->outputs.push_back(node->value);
      result.push_back(Variable(std::move(node)));
    }
    return result;
  }
  // Checkpoint: the region's outputs (computed without a graph) as the outputs of `fn`,
  // sharing their buffers.
  static std::vector<Variable> WrapShared(const std::vector<Variable>& outputs,
                                          const std::shared_ptr<GradFn>& fn) {
    std::vector<Variable> result;
    for (size_t o = 0; o < outputs.size(); ++o) {
      auto node = std::make_shared<Node>();
      node->value = Counted(Checked(outputs[o].node_, "region outputs").value);
      if (IsFloating(node->value->dtype())) {
        node->requires_grad = true;
        node->grad_fn = fn;
        node->output_index = o;
      }
      fn->outputs.push_back(node->value);
      result.push_back(Variable(std::move(node)));
    }
    return result;
  }
  // A new leaf holding the same value as input `i` of fn (no copy), requiring grad as the
  // input did.
  static Variable Leaf(const GradFn& fn, size_t i) {
    auto node = std::make_shared<Node>();
    node->value = fn.input_values[i];
    node->requires_grad = fn.inputs[i]->requires_grad;
    return Variable(std::move(node));
  }
  static const std::shared_ptr<Node>& NodeOf(const Variable& v) { return v.node_; }
};


std::vector<Variable> Apply(std::string_view op_name, const std::vector<Variable>& inputs,
                            const Attrs& attrs, Communicator& comm) {
  const OpDecl* op = FindOp(op_name);
  if (op == nullptr) {
    throw SpmdError(ErrorType::kUnknownOp, "op", "'" + std::string(op_name) + "' is not a registered op");
  }
  std::vector<const DistTensor*> values;  // the inputs' values, not copies
  values.reserve(inputs.size());
  bool any_requires_grad = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& node = Checked(inputs[i].node_, ("inputs[" + std::to_string(i) + "]").c_str());
    values.push_back(node.value.get());
    any_requires_grad = any_requires_grad || node.requires_grad;
  }
  std::vector<DistTensor> outputs = runtime::Dispatch(*op, values, attrs, comm);

  // Outputs that are not floating (masks, indices) carry no gradient; an op with only
  // such outputs is not recorded.
  bool differentiable = false;
  for (const DistTensor& out : outputs) differentiable = differentiable || IsFloating(out.dtype());
  const bool record = grad_enabled && any_requires_grad && differentiable;
  if (record && !op->vjp) {
    ThrowUnsupported("op", op->name + " has no declared backward (OpDecl::vjp); run it under "
                           "NoGradGuard or on inputs that do not require grad");
  }

  std::shared_ptr<GradFn> fn;
  if (record) {
    fn = Recorder::NewStep(inputs);
    fn->op = op;
    fn->attrs = op->NormalizeAttrs(attrs);
  }
  return Recorder::Wrap(std::move(outputs), fn);
}

Variable Apply1(std::string_view op, const std::vector<Variable>& inputs, const Attrs& attrs,
                Communicator& comm) {
  std::vector<Variable> outputs = Apply(op, inputs, attrs, comm);
  if (outputs.size() != 1) {
    ThrowInvalid("op", std::string(op) + " has " + std::to_string(outputs.size()) +
                           " outputs; use Apply");
  }
  return std::move(outputs[0]);
}

Variable Redistribute(const Variable& x, const DistAttr& to, Communicator& comm) {
  const Node& input = Checked(x.node_, "x");
  std::vector<DistTensor> outputs;
  // Already laid out as asked: the same values, sharing the buffer rather than copying it.
  outputs.push_back(input.value->dist_attr() == to ? Shared(*input.value) : input.value->Reshard(to, comm));
  std::shared_ptr<GradFn> fn;
  if (grad_enabled && input.requires_grad) fn = Recorder::NewStep({x});
  return std::move(Recorder::Wrap(std::move(outputs), fn)[0]);
}

std::vector<Variable> ApplyFunction(std::string name, const std::vector<Variable>& inputs,
                                    std::vector<DistTensor> outputs, BackwardFunction backward,
                                    CotangentLayout cotangent_layout) {
  if (!backward) ThrowInvalid("backward", name + ": an empty backward function");
  bool any_requires_grad = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& node = Checked(inputs[i].node_, ("inputs[" + std::to_string(i) + "]").c_str());
    any_requires_grad = any_requires_grad || node.requires_grad;
  }
  std::shared_ptr<GradFn> fn;
  if (grad_enabled && any_requires_grad) {
    fn = Recorder::NewStep(inputs);
    fn->name = std::move(name);
    fn->custom = std::move(backward);
    fn->as_arrived = cotangent_layout == CotangentLayout::kAsArrived;
  }
  return Recorder::Wrap(std::move(outputs), fn);
}

std::vector<Variable> Checkpoint(std::string name, const std::vector<Variable>& inputs, Region region,
                                 Communicator& comm) {
  if (!region) ThrowInvalid("region", name + ": an empty region");
  for (size_t i = 0; i < inputs.size(); ++i) {
    Checked(Recorder::NodeOf(inputs[i]), ("inputs[" + std::to_string(i) + "]").c_str());
  }
  if (!grad_enabled) return region(inputs, comm);
  std::vector<Variable> outputs;
  {
    NoGradGuard no_grad;  // the region's intermediates are freed as it goes
    outputs = region(inputs, comm);
  }
  auto fn = Recorder::NewStep(inputs);
  fn->name = std::move(name);
  fn->region = std::move(region);
  return Recorder::WrapShared(outputs, fn);
}

// ---- Backward -----------------------------------------------------------------------------

namespace {

// Backward from several outputs at once, each with its cotangent.
void RunBackward(std::vector<std::pair<std::shared_ptr<Node>, DistTensor>> seeds, Communicator& comm);

// Runs fn's backward given one cotangent per output (missing ones are zeros) and hands
// each input's gradient to `deliver`.
template <typename Deliver>
void RunVjp(GradFn& fn, std::vector<std::optional<DistTensor>>& cotangents, Communicator& comm,
            Deliver deliver) {
  if (fn.region) {
    // Checkpoint: the region again, recorded this time, from leaves holding the inputs'
    // values; then its backward from the cotangents as they came (no reshard: the same
    // values as a recorded region would have received). Parameters the region reads
    // receive their gradients there; the inputs' come back through the leaves.
    // The forward's outputs are not needed any more: let them go before the replay makes
    // them again (unless a Variable still holds them).
    const size_t output_count = fn.outputs.size();
    fn.outputs.clear();
    std::vector<Variable> leaves;
    for (size_t i = 0; i < fn.inputs.size(); ++i) leaves.push_back(Recorder::Leaf(fn, i));
    std::vector<Variable> replayed;
    {
      struct Recording {  // the backward runs under NoGradGuard: record the replay
        bool previous = grad_enabled;
        Recording() { grad_enabled = true; }
        ~Recording() { grad_enabled = previous; }
      } recording;
      replayed = fn.region(leaves, comm);
    }
    if (replayed.size() != output_count) {
      ThrowInvalid("region", "backward of " + fn.name + ": the region gave " + std::to_string(replayed.size()) +
                                 " outputs, not the " + std::to_string(output_count) + " of its forward");
    }
    std::vector<std::pair<std::shared_ptr<Node>, DistTensor>> seeds;
    for (size_t o = 0; o < cotangents.size(); ++o) {
      const std::shared_ptr<Node>& node = Recorder::NodeOf(replayed[o]);
      if (cotangents[o] && node->requires_grad) seeds.emplace_back(node, std::move(*cotangents[o]));
    }
    replayed.clear();
    if (!seeds.empty()) RunBackward(std::move(seeds), comm);
    for (size_t i = 0; i < leaves.size(); ++i) {
      const std::shared_ptr<Node>& leaf = Recorder::NodeOf(leaves[i]);
      if (leaf->requires_grad && leaf->grad) deliver(i, std::move(*leaf->grad));
    }
    return;
  }
  if (fn.custom) {
    // ApplyFunction: the cotangents laid out as the outputs, zeros where none arrived.
    std::vector<DistTensor> given;
    for (size_t o = 0; o < cotangents.size(); ++o) {
      const DistTensor& out = *fn.outputs[o];
      if (!cotangents[o]) {
        given.push_back(ConstantLike(out, out.dist_attr(), 0.0));
      } else if (!fn.as_arrived && !(cotangents[o]->dist_attr() == out.dist_attr())) {
        given.push_back(cotangents[o]->Reshard(out.dist_attr(), comm));
      } else {
        given.push_back(std::move(*cotangents[o]));
      }
    }
    std::vector<std::optional<DistTensor>> grads = fn.custom(given, comm);
    const std::string where = "backward of " + fn.name;
    if (grads.size() != fn.inputs.size()) {
      ThrowInvalid("backward", where + ": " + std::to_string(grads.size()) + " gradients for " +
                                   std::to_string(fn.inputs.size()) + " inputs");
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i] || !fn.inputs[i]->requires_grad) continue;
      const DistTensor& input = *fn.input_values[i];
      if (grads[i]->shape() != input.shape() || grads[i]->dtype() != input.dtype() ||
          !(grads[i]->mesh() == input.mesh())) {
        ThrowInvalid("backward", where + ": gradient " + std::to_string(i) +
                                     " does not match its input's shape, dtype and mesh");
      }
      deliver(i, std::move(*grads[i]));
    }
    return;
  }
  if (fn.op == nullptr) {
    // Redistribute: the identity on values; the cotangent goes back to the layout the
    // input had (the transpose of the forward's collective: an all-gather's is a
    // reduce-scatter).
    if (cotangents[0] && fn.inputs[0]->requires_grad) {
      const DistAttr& source = fn.input_values[0]->dist_attr();
      const DistTensor& g = *cotangents[0];
      deliver(0, g.dist_attr() == source ? Shared(g) : g.Reshard(WithoutPartial(source), comm));
    }
    return;
  }
  std::vector<Shape> shapes;
  for (const auto& value : fn.input_values) shapes.push_back(value->shape());
  const VjpGraph graph = fn.op->vjp(RuleContext{shapes, fn.attrs});
  const std::string where = "backward of " + fn.op->name;
  if (graph.input_grads.size() != fn.inputs.size()) {
    ThrowInvalid("vjp.input_grads", where + ": " + std::to_string(graph.input_grads.size()) +
                                        " entries for " + std::to_string(fn.inputs.size()) +
                                        " inputs");
  }
  for (size_t o = 0; o < cotangents.size(); ++o) {
    if (cotangents[o]) continue;
    const DistTensor& out = *fn.outputs[o];
    cotangents[o] = ConstantLike(out, out.dist_attr(), 0.0);
  }
  std::vector<std::vector<DistTensor>> results;
  auto resolve = [&](const VjpRef& ref, size_t k) -> const DistTensor& {
    const auto bad = [&](const std::string& why) -> const DistTensor& {
      ThrowInvalid("vjp.calls[" + std::to_string(k) + "]", where + ": " + why);
    };
    switch (ref.kind) {
      case VjpRef::Kind::kInput:
        if (ref.index >= fn.inputs.size()) return bad("input out of range");
        return *fn.input_values[ref.index];
      case VjpRef::Kind::kOutput:
        if (ref.index >= fn.outputs.size()) return bad("output out of range");
        return *fn.outputs[ref.index];
      case VjpRef::Kind::kOutputGrad:
        if (ref.index >= cotangents.size()) return bad("cotangent out of range");
        return *cotangents[ref.index];
      case VjpRef::Kind::kCall:
        if (ref.index >= k || ref.result >= results[ref.index].size()) {
          return bad("refers to a call result that does not exist yet");
        }
        return results[ref.index][ref.result];
    }
    return bad("unknown reference kind");
  };
  for (size_t k = 0; k < graph.calls.size(); ++k) {
    const VjpCall& call = graph.calls[k];
    std::vector<const DistTensor*> operands;
    for (const VjpRef& ref : call.operands) operands.push_back(&resolve(ref, k));
    const OpDecl* callee = FindOp(call.op);
    if (callee == nullptr) {
      throw SpmdError(ErrorType::kUnknownOp, "vjp.calls[" + std::to_string(k) + "].op",
                      where + ": '" + call.op + "' is not a registered op");
    }
    try {
      results.push_back(runtime::Dispatch(*callee, operands, call.attrs, comm));
    } catch (const SpmdError& e) {
      throw SpmdError(e.type(), "vjp.calls[" + std::to_string(k) + "] (" + call.op + ")" +
                                    (e.field().empty() ? "" : "." + e.field()),
                      where + ": " + e.what());
    }
  }
  // Hand each gradient over, moving it out of the call results or cotangents at its last
  // use (gradients are whole tensors: a copy per edge would double the backward's traffic
  // through memory).
  std::vector<size_t> wanted;
  for (size_t i = 0; i < fn.inputs.size(); ++i) {
    if (graph.input_grads[i] && fn.inputs[i]->requires_grad) wanted.push_back(i);
  }
  for (size_t w = 0; w < wanted.size(); ++w) {
    const size_t i = wanted[w];
    const VjpRef& ref = *graph.input_grads[i];
    bool used_later = false;
    for (size_t later = w + 1; later < wanted.size(); ++later) {
      used_later = used_later || *graph.input_grads[wanted[later]] == ref;
    }
    const DistTensor& g = resolve(ref, graph.calls.size());
    const bool owned = ref.kind == VjpRef::Kind::kCall || ref.kind == VjpRef::Kind::kOutputGrad;
    if (owned && !used_later) {
      deliver(i, std::move(const_cast<DistTensor&>(g)));  // storage owned by this function
    } else {
      deliver(i, Shared(g));
    }
  }
}

}  // namespace

void Backward(const Variable& loss, Communicator& comm) {
  const Node& root = Checked(loss.node_, "loss");
  if (!root.requires_grad) ThrowInvalid("loss", "does not require grad: nothing to differentiate");
  const DistTensor& value = *root.value;
  Backward(loss, ConstantLike(value, DistAttr::Replicated(static_cast<int>(value.shape().size())), 1.0),
           comm);
}

void Backward(const Variable& loss, const DistTensor& cotangent, Communicator& comm) {
  const Node& root = Checked(loss.node_, "loss");
  if (!root.requires_grad) ThrowInvalid("loss", "does not require grad: nothing to differentiate");
  const DistTensor& value = *root.value;
  if (cotangent.shape() != value.shape() || cotangent.dtype() != value.dtype() ||
      !(cotangent.mesh() == value.mesh())) {
    ThrowInvalid("cotangent", "must have the output's shape, dtype and mesh");
  }
  std::vector<std::pair<std::shared_ptr<Node>, DistTensor>> seeds;
  seeds.emplace_back(loss.node_, cotangent);
  RunBackward(std::move(seeds), comm);
}

namespace {

void RunBackward(std::vector<std::pair<std::shared_ptr<Node>, DistTensor>> seeds, Communicator& comm) {
  NoGradGuard no_grad;  // the backward's own calls are not recorded

  auto accumulate_leaf = [&](Node& leaf, DistTensor g) {
    if (leaf.grad_layout && !(g.dist_attr() == *leaf.grad_layout)) {
      g = std::move(g).Reshard(*leaf.grad_layout, comm);
    }
    leaf.grad = leaf.grad ? Add(*leaf.grad, g, comm) : std::move(g);
  };

  // Every recorded call reachable from the seeds, latest first: a call's outputs are
  // created after its inputs, so creation order is a topological order. `order` owns the
  // calls: freeing a spent call's inputs must not free a call still to run.
  std::vector<std::shared_ptr<GradFn>> order;
  std::unordered_set<GradFn*> seen;
  std::vector<std::shared_ptr<GradFn>> stack;
  for (const auto& [node, cotangent] : seeds) {
    if (node->grad_fn && seen.insert(node->grad_fn.get()).second) stack.push_back(node->grad_fn);
  }
  while (!stack.empty()) {
    std::shared_ptr<GradFn> fn = std::move(stack.back());
    stack.pop_back();
    if (fn->released) {
      ThrowInvalid("loss", "Backward already ran through this graph (" +
                               (fn->op ? fn->op->name : !fn->name.empty() ? fn->name : std::string("redistribute")) +
                               "); record the forward again");
    }
    for (const auto& input : fn->inputs) {
      const std::shared_ptr<GradFn>& producer = input->grad_fn;
      if (producer && seen.insert(producer.get()).second) stack.push_back(producer);
    }
    order.push_back(std::move(fn));
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a->sequence > b->sequence;
  });

  std::unordered_map<GradFn*, std::vector<std::optional<DistTensor>>> cotangents;
  auto slot = [&](GradFn* fn, size_t o) -> std::optional<DistTensor>& {
    auto& slots = cotangents[fn];
    if (slots.empty()) slots.resize(fn->outputs.size());
    return slots[o];
  };
  for (auto& [node, cotangent] : seeds) {
    if (!node->grad_fn) {
      accumulate_leaf(*node, std::move(cotangent));
      continue;
    }
    std::optional<DistTensor>& target = slot(node->grad_fn.get(), node->output_index);
    target = target ? Add(*target, cotangent, comm) : std::move(cotangent);
  }

  for (const std::shared_ptr<GradFn>& owned : order) {
    GradFn* fn = owned.get();
    auto found = cotangents.find(fn);
    if (found != cotangents.end()) {
      RunVjp(*fn, found->second, comm, [&](size_t i, DistTensor g) {
        Node& input = *fn->inputs[i];
        if (input.grad_fn) {
          std::optional<DistTensor>& target = slot(input.grad_fn.get(), input.output_index);
          target = target ? Add(*target, g, comm) : std::move(g);
        } else {
          accumulate_leaf(input, std::move(g));
        }
      });
      cotangents.erase(fn);
    }
    // Free what the backward held: the graph is spent.
    fn->released = true;
    fn->inputs.clear();
    fn->input_values.clear();
    fn->outputs.clear();
    fn->region = nullptr;
  }
}

}  // namespace

DistTensor Gradient(const Variable& leaf, const DistAttr& to, Communicator& comm) {
  const Node& node = Checked(leaf.node_, "leaf");
  if (node.grad_fn || !node.requires_grad) {
    ThrowInvalid("leaf", "not a leaf that requires grad");
  }
  const DistTensor& value = *node.value;
  if (!node.grad) {
    return ConstantLike(value, to, 0.0);
  }
  if (node.grad->dist_attr() == to) return Shared(*node.grad);  // no copy of the buffer
  return node.grad->Reshard(to, comm);
}

}  // namespace spmd::train
