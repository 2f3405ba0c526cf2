// Optimizers on sharded parameters: SGD with momentum and AdamW, with clipping by global norm.
//
// Each parameter is registered with its *state layout*: the dist attr (on the parameter's
// mesh) its reduced gradient and its optimizer states live in. A step, per parameter:
//   1. g = Gradient(param, state layout): the accumulated (possibly partial) gradient
//      reduced to the state layout. Parameter replicated over dp and state layout
//      replicated: an all-reduce (data parallelism). State layout sharded over dp: a
//      reduce-scatter (ZeRO-1/2: each rank reduces and keeps 1/N of the gradient).
//   2. with clipping on, every g is scaled by min(1, max_norm / (norm + 1e-6)), the norm
//      taken over all parameters' reduced gradients: each gradient's squared sum is
//      reduced over the axes it is sharded on, so every element counts once, whatever
//      the layouts.
//   3. the update runs elementwise on the state layout through Dispatch (SGD: scale, add,
//      subtract; AdamW: one fused adamw op): each rank updates its own slice of the states
//      and of the parameter (the parameter's value resharded to the state layout: a local
//      slice).
//   4. the updated slice is resharded back to the parameter's own layout (an all-gather
//      for ZeRO-1/2; nothing when the parameter is itself stored sharded, ZeRO-3) and
//      replaces the parameter's value (Variable::SetValue).
// The state layout may not be partial. Steps run under NoGradGuard. Like every collective,
// Step must be called by every rank of the parameters' meshes, with parameters registered
// in the same order.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "rules/model/dist_attr.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "train/autograd.h"

namespace spmd::train {

struct ParamSlot {
  Variable param;       // a leaf that requires grad
  DistAttr state_layout;  // where its reduced gradient and states live
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Registers `param` (a leaf requiring grad; InvalidArgument "param" otherwise) with the
  // state layout (InvalidArgument "state_layout" when it is partial or invalid for the
  // parameter's shape and mesh). Without a state layout: the parameter's own layout.
  void Add(const Variable& param, std::optional<DistAttr> state_layout = std::nullopt);

  // Clip gradients to this global norm in Step (0 or less: no clipping).
  void set_max_grad_norm(double max_norm) { max_grad_norm_ = max_norm; }
  // World ranks whose optimizers hold the model's other parameters (pipeline stages, one
  // rank per stage, this one included, the same list on each): Step sums its squared
  // gradient norm over them (an all-reduce) before clipping, so the norm is the whole
  // model's. Empty (the default): this optimizer's parameters only.
  void set_norm_group(runtime::Group group) { norm_group_ = std::move(group); }
  // The global gradient norm the last Step measured (before clipping). When it is not
  // finite, that Step applied no update (parameters and states unchanged, gradients
  // zeroed): the caller decides what follows (Trainer::Step raises NonFiniteError).
  double last_grad_norm() const { return last_grad_norm_; }

  // One update of every registered parameter (see the file comment); then their
  // gradients are zeroed.
  void Step(runtime::Communicator& comm);
  void ZeroGrad();

  const std::vector<ParamSlot>& params() const { return params_; }
  // The bytes this rank holds for optimizer states (the local shards).
  virtual int64_t StateBytes() const = 0;

 protected:
  // Updates slot `i`: `grad` and `param` are laid out as its state layout; returns the
  // new parameter value in that layout.
  virtual runtime::DistTensor Update(size_t i, const runtime::DistTensor& param,
                                     const runtime::DistTensor& grad,
                                     runtime::Communicator& comm) = 0;
  virtual void OnAdd(const ParamSlot& slot) = 0;

 private:
  std::vector<ParamSlot> params_;
  double max_grad_norm_ = 0;
  double last_grad_norm_ = 0;
  runtime::Group norm_group_;
};

// p <- p - lr * (v <- momentum * v + g + weight_decay * p) (PyTorch's SGD; no dampening).
class Sgd final : public Optimizer {
 public:
  explicit Sgd(double lr, double momentum = 0, double weight_decay = 0);
  int64_t StateBytes() const override;

 protected:
  runtime::DistTensor Update(size_t i, const runtime::DistTensor& param,
                             const runtime::DistTensor& grad, runtime::Communicator& comm) override;
  void OnAdd(const ParamSlot& slot) override;

 private:
  double lr_, momentum_, weight_decay_;
  std::vector<std::optional<runtime::DistTensor>> velocity_;
};

// Where AdamW keeps its moments between updates (train/offload.h): with one set, each
// parameter's moments go to Fetch just before its update and to Store right after it (and
// after OnAdd and Restore). Both must keep every bit, the layout and the mesh.
class StateHome {
 public:
  virtual ~StateHome() = default;
  virtual void Fetch(size_t i, runtime::DistTensor& m, runtime::DistTensor& v) = 0;
  virtual void Store(size_t i, runtime::DistTensor& m, runtime::DistTensor& v) = 0;
};

// AdamW (decoupled weight decay, bias correction), PyTorch's definition:
//   p <- p * (1 - lr * wd); m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2;
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
class AdamW final : public Optimizer {
 public:
  explicit AdamW(double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
                 double weight_decay = 0.01);
  int64_t StateBytes() const override;

  // Parameter i's states (laid out as its state layout) and its step count, for
  // checkpoints; Restore replaces them (resharded to the state layout; InvalidArgument
  // "state" when a shape or dtype differs).
  const runtime::DistTensor& first_moment(size_t i) const { return m_.at(i); }
  const runtime::DistTensor& second_moment(size_t i) const { return v_.at(i); }
  int64_t step(size_t i) const { return steps_.at(i); }
  void Restore(size_t i, const runtime::DistTensor& m, const runtime::DistTensor& v, int64_t step,
               runtime::Communicator& comm);
  // Hands every moment, now and from now on, to `home` between updates (not owned; null:
  // they stay where the update leaves them).
  void set_state_home(StateHome* home);

 protected:
  runtime::DistTensor Update(size_t i, const runtime::DistTensor& param,
                             const runtime::DistTensor& grad, runtime::Communicator& comm) override;
  void OnAdd(const ParamSlot& slot) override;

 private:
  double lr_, beta1_, beta2_, eps_, weight_decay_;
  std::vector<int64_t> steps_;
  std::vector<runtime::DistTensor> m_, v_;
  StateHome* home_ = nullptr;
};

}  // namespace spmd::train
