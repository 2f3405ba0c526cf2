#include "train/optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include "rules/error.h"
#include "rules/notation.h"
#include "runtime/dispatch.h"

namespace spmd::train {

using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

namespace {

DistTensor Run(const char* op, std::vector<DistTensor> inputs, Communicator& comm,
               const Attrs& attrs = {}) {
  return std::move(runtime::Dispatch(op, inputs, attrs, comm)[0]);
}

DistTensor Scale(const DistTensor& x, double scale, Communicator& comm, double bias = 0) {
  return Run("scale", {x}, comm, MakeAttrs({{"scale", scale}, {"bias", bias}}));
}

// The value resharded to `attr` (a copy when it already is).
DistTensor As(const DistTensor& x, const DistAttr& attr, Communicator& comm) {
  return x.dist_attr() == attr ? x : x.Reshard(attr, comm);
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
  // (ToGlobal sums the partial addends the rule leaves on sharded axes).
  double squared = 0;
  for (const DistTensor& g : grads) {
    const std::optional<kernels::Tensor> s = Run("squared_l2_norm", {g}, comm).ToGlobal(comm);
    if (s) squared += s->dtype() == DType::kFloat64 ? s->data<double>()[0]
                                                     : static_cast<double>(s->data<float>()[0]);
  }
  if (norm_group_.size() > 1) {
    comm.AllReduce(&squared, &squared, 1, DType::kFloat64, ReduceOp::kSum, norm_group_);
  }
  last_grad_norm_ = std::sqrt(squared);
  if (max_grad_norm_ > 0 && last_grad_norm_ > max_grad_norm_) {
    const double coef = max_grad_norm_ / (last_grad_norm_ + 1e-6);
    for (DistTensor& g : grads) g = Scale(g, coef, comm);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSlot& slot = params_[i];
    const DistTensor& value = slot.param.value();
    const DistTensor updated = Update(i, As(value, slot.state_layout, comm), grads[i], comm);
    slot.param.SetValue(As(updated, value.dist_attr(), comm));
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
  if (weight_decay_ != 0) step = Run("add", {step, Scale(param, weight_decay_, comm)}, comm);
  if (momentum_ != 0) {
    std::optional<DistTensor>& v = velocity_[i];
    v = v ? Run("add", {Scale(*v, momentum_, comm), step}, comm) : step;
    step = *v;
  }
  return Run("subtract", {param, Scale(step, lr_, comm)}, comm);
}

// ---- AdamW --------------------------------------------------------------------------------

AdamW::AdamW(double lr, double beta1, double beta2, double eps, double weight_decay)
    : lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {}

void AdamW::OnAdd(const ParamSlot& slot) {
  const DistTensor& p = slot.param.value();
  steps_.push_back(0);
  m_.push_back(Constant(p.shape(), p.dtype(), p.mesh(), slot.state_layout, p.process_id(), 0));
  v_.push_back(Constant(p.shape(), p.dtype(), p.mesh(), slot.state_layout, p.process_id(), 0));
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
  m_[i] = As(m, old.dist_attr(), comm);
  v_[i] = As(v, old.dist_attr(), comm);
  steps_[i] = step;
}

int64_t AdamW::StateBytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < m_.size(); ++i) bytes += LocalBytes(m_[i]) + LocalBytes(v_[i]);
  return bytes;
}

DistTensor AdamW::Update(size_t i, const DistTensor& param, const DistTensor& grad,
                         Communicator& comm) {
  const int64_t t = ++steps_[i];
  m_[i] = Run("add", {Scale(m_[i], beta1_, comm), Scale(grad, 1 - beta1_, comm)}, comm);
  v_[i] = Run("add", {Scale(v_[i], beta2_, comm),
                      Scale(Run("multiply", {grad, grad}, comm), 1 - beta2_, comm)},
              comm);
  const double correction1 = 1 - std::pow(beta1_, static_cast<double>(t));
  const double correction2 = 1 - std::pow(beta2_, static_cast<double>(t));
  // denominator = sqrt(v / c2) + eps; step = lr * (m / c1) / denominator
  const DistTensor denominator =
      Scale(Run("sqrt", {Scale(v_[i], 1 / correction2, comm)}, comm), 1, comm, eps_);
  const DistTensor step =
      Scale(Run("divide", {m_[i], denominator}, comm), lr_ / correction1, comm);
  const DistTensor decayed = Scale(param, 1 - lr_ * weight_decay_, comm);
  return Run("subtract", {decayed, step}, comm);
}

}  // namespace spmd::train
