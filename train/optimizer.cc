#include "train/optimizer.h"

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "runtime/exec/dispatch.h"
#include "train/device.h"

namespace spmd::train {

using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

namespace {

// Runs `op` on `inputs`, by reference: no input is copied (a temporary argument lives to
// the end of the caller's full expression).
template <typename... Inputs>
DistTensor Run(const char* op, const Attrs& attrs, Communicator& comm, const Inputs&... inputs) {
  static_assert((std::is_same_v<Inputs, DistTensor> && ...), "inputs are DistTensors");
  return std::move(
      runtime::Dispatch(*FindOp(op), std::vector<const DistTensor*>{&inputs...}, attrs, comm)[0]);
}

DistTensor Scale(const DistTensor& x, double scale, Communicator& comm, double bias = 0) {
  return Run("scale", MakeAttrs({{"scale", scale}, {"bias", bias}}), comm, x);
}

// `x` laid out as `attr`: `x` itself when it already is (no copy), else its reshard, held
// in `keep`.
const DistTensor& As(const DistTensor& x, const DistAttr& attr, Communicator& comm,
                     std::optional<DistTensor>& keep) {
  if (x.dist_attr() == attr) return x;
  keep = x.Reshard(attr, comm);
  return *keep;
}

int64_t LocalBytes(const DistTensor& t) { return t.has_local() ? static_cast<int64_t>(t.local().nbytes()) : 0; }

}  // namespace

// ---- Optimizer ----------------------------------------------------------------------------

void Optimizer::Add(const Variable& param, std::optional<DistAttr> state_layout) {
  if (!param.defined() || !param.is_leaf() || !param.requires_grad()) {
    ThrowInvalid("param", "must be a leaf variable that requires grad");
  }
  const DistTensor& value = param.value();
  DistAttr layout = state_layout.value_or(value.dist_attr());
  Validate(layout, value.mesh(), static_cast<int>(value.shape().size()), "state_layout");
  if (layout.IsPartial()) ThrowInvalid("state_layout", "an optimizer state cannot be partial");
  params_.push_back({param, std::move(layout)});
  OnAdd(params_.back());
}

void Optimizer::ZeroGrad() {
  for (const ParamSlot& slot : params_) slot.param.ZeroGrad();
}

void Optimizer::Step(Communicator& comm) {
  NoGradGuard no_grad;
  std::vector<DistTensor> grads;
  grads.reserve(params_.size());
  for (const ParamSlot& slot : params_) {
    grads.push_back(Gradient(slot.param, slot.state_layout, comm));
  }
  // The global norm: each reduced gradient's squared sum, reduced over its own layout
  // (ToGlobal sums the partial addends the rule leaves on sharded axes, on the gradient's
  // device), read back to the host (ReadScalar: after its stream ran), summed in float64.
  double squared = 0;
  for (const DistTensor& g : grads) {
    const std::optional<kernels::Tensor> s = Run("squared_l2_norm", {}, comm, g).ToGlobal(comm);
    if (s) squared += ReadScalar(*s);
  }
  if (norm_group_.size() > 1) {
    // Over the norm group (pipeline stages), on a buffer of the communicator's device,
    // ordered on its stream.
    kernels::Tensor sum = OnDevice(kernels::Tensor::FromVector({1}, std::vector<double>{squared}),
                                   comm.device(), comm.stream());
    comm.AllReduce(sum.bytes(), sum.bytes(), 1, DType::kFloat64, ReduceOp::kSum, norm_group_);
    squared = ReadScalar(sum);
  }
  last_grad_norm_ = std::sqrt(squared);
  // A non-finite gradient would make every parameter (and AdamW's moments) non-finite:
  // apply nothing and leave the decision to the caller (the Trainer stops naming the step).
  // `squared` is the same on every rank, so every rank returns here alike.
  if (!std::isfinite(last_grad_norm_)) {
    ZeroGrad();
    return;
  }
  if (max_grad_norm_ > 0 && last_grad_norm_ > max_grad_norm_) {
    const double coef = max_grad_norm_ / (last_grad_norm_ + 1e-6);
    for (DistTensor& g : grads) g = Scale(g, coef, comm);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSlot& slot = params_[i];
    const DistTensor& value = slot.param.value();
    std::optional<DistTensor> resharded;
    DistTensor updated = Update(i, As(value, slot.state_layout, comm, resharded), grads[i], comm);
    if (!(updated.dist_attr() == value.dist_attr())) updated = updated.Reshard(value.dist_attr(), comm);
    slot.param.SetValue(std::move(updated));
  }
  ZeroGrad();
}

// ---- SGD ----------------------------------------------------------------------------------

Sgd::Sgd(double lr, double momentum, double weight_decay)
    : lr_(lr), momentum_(momentum), weight_decay_(weight_decay) {}

void Sgd::OnAdd(const ParamSlot&) { velocity_.emplace_back(); }

int64_t Sgd::StateBytes() const {
  int64_t bytes = 0;
  for (const auto& v : velocity_) bytes += v ? LocalBytes(*v) : 0;
  return bytes;
}

DistTensor Sgd::Update(size_t i, const DistTensor& param, const DistTensor& grad,
                       Communicator& comm) {
  DistTensor step = grad;
  if (weight_decay_ != 0) step = Run("add", {}, comm, step, Scale(param, weight_decay_, comm));
  if (momentum_ != 0) {
    std::optional<DistTensor>& v = velocity_[i];
    v = v ? Run("add", {}, comm, Scale(*v, momentum_, comm), step) : step;
    step = *v;
  }
  return Run("subtract", {}, comm, param, Scale(step, lr_, comm));
}

// ---- AdamW --------------------------------------------------------------------------------

AdamW::AdamW(double lr, double beta1, double beta2, double eps, double weight_decay)
    : lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {}

void AdamW::OnAdd(const ParamSlot& slot) {
  const DistTensor& p = slot.param.value();
  steps_.push_back(0);
  m_.push_back(ConstantLike(p, slot.state_layout, 0));
  v_.push_back(ConstantLike(p, slot.state_layout, 0));
  if (home_) home_->Store(m_.size() - 1, m_.back(), v_.back());
}

void AdamW::set_state_home(StateHome* home) {
  home_ = home;
  if (home_) {
    for (size_t i = 0; i < m_.size(); ++i) home_->Store(i, m_[i], v_[i]);
  }
}

void AdamW::Restore(size_t i, const DistTensor& m, const DistTensor& v, int64_t step,
                    Communicator& comm) {
  const DistTensor& old = m_.at(i);
  for (const DistTensor* t : {&m, &v}) {
    if (t->shape() != old.shape() || t->dtype() != old.dtype() || !(t->mesh() == old.mesh())) {
      ThrowInvalid("state", "a restored state must keep the parameter's shape, dtype and mesh");
    }
  }
  if (step < 0) ThrowInvalid("state", "a negative step count");
  std::optional<DistTensor> m_resharded, v_resharded;
  m_[i] = As(m, old.dist_attr(), comm, m_resharded);
  v_[i] = As(v, old.dist_attr(), comm, v_resharded);
  steps_[i] = step;
  if (home_) home_->Store(i, m_[i], v_[i]);
}

int64_t AdamW::StateBytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < m_.size(); ++i) bytes += LocalBytes(m_[i]) + LocalBytes(v_[i]);
  return bytes;
}

DistTensor AdamW::Update(size_t i, const DistTensor& param, const DistTensor& grad,
                         Communicator& comm) {
  const int64_t t = ++steps_[i];
  if (home_) home_->Fetch(i, m_[i], v_[i]);
  // One fused op (rules/ops/adamw_plan.h): the moments and the parameter in one pass.
  const Attrs attrs = MakeAttrs({{"lr", lr_},
                                 {"beta1", beta1_},
                                 {"beta2", beta2_},
                                 {"epsilon", eps_},
                                 {"weight_decay", weight_decay_},
                                 {"step", t}});
  std::vector<DistTensor> outs =
      runtime::Dispatch(*FindOp("adamw"), {&param, &grad, &m_[i], &v_[i]}, attrs, comm);
  DistTensor updated = std::move(outs[0]);
  m_[i] = std::move(outs[1]);
  v_[i] = std::move(outs[2]);
  if (home_) home_->Store(i, m_[i], v_[i]);
  return updated;
}

}  // namespace spmd::train
