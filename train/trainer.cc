#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "rules/ops/counter_rng.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "train/data.h"
#include "train/device.h"

namespace spmd::train {

using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

namespace {

int64_t Sum(const runtime::CommCounters& c, bool sent) {
  int64_t total = 0;
  for (const auto& k : c.per_kind) total += sent ? k.sent : k.received;
  return total;
}

int64_t LocalBytes(const DistTensor& t) {
  return t.has_local() ? static_cast<int64_t>(t.local().nbytes()) : 0;
}

std::string NonFiniteText(double value) {
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

// Tokens or labels, built on the host, sharded there and each shard copied to the
// communicator's device.
DistTensor Tokens(const kernels::Tensor& host, const Layout& layout, Communicator& comm) {
  return OnDevice(DistTensor::ShardTensor(host, layout.mesh(), layout.Tokens(2), comm.rank()),
                  comm.device(), comm.stream());
}

}  // namespace

NonFiniteError::NonFiniteError(int64_t step, const std::string& what, double value)
    : SpmdError(ErrorType::kInvalidArgument, "step " + std::to_string(step),
                what + " is " + NonFiniteText(value)),
      step_(step) {}

void CheckFinite(int64_t step, const std::string& what, double value) {
  if (!std::isfinite(value)) throw NonFiniteError(step, what, value);
}

void MakeBatch(const BatchSpec& spec, int64_t vocab, int64_t step, kernels::Tensor* tokens,
               kernels::Tensor* labels) {
  if (spec.corpus != nullptr) {
    if (spec.corpus->max_token() >= vocab) {
      ThrowInvalid("batch.corpus", "token " + std::to_string(spec.corpus->max_token()) +
                                       " is not below the vocabulary (" + std::to_string(vocab) + ")");
    }
    spec.corpus->Batch(Split::kTrain, spec.batch, spec.sequence, spec.seed, step, tokens, labels);
    return;
  }
  std::vector<int64_t> t(spec.batch * spec.sequence), l(spec.batch * spec.sequence);
  for (int64_t r = 0; r < spec.batch; ++r) {
    int64_t value = static_cast<int64_t>(
        counter_rng::SplitMix64(counter_rng::SplitMix64(spec.seed) ^ (static_cast<uint64_t>(step) << 20) ^ static_cast<uint64_t>(r)) %
        static_cast<uint64_t>(vocab));
    for (int64_t i = 0; i < spec.sequence; ++i) {
      t[r * spec.sequence + i] = value;
      value = (5 * value + 3 + (i % 2)) % vocab;
      l[r * spec.sequence + i] = value;
    }
  }
  *tokens = kernels::Tensor::FromVector({spec.batch, spec.sequence}, t);
  *labels = kernels::Tensor::FromVector({spec.batch, spec.sequence}, l);
}

namespace {

// `config` computing in `policy`'s compute dtype.
GptConfig WithPolicy(GptConfig config, const PrecisionPolicy& policy) {
  if (policy.compute != config.dtype) config.compute_dtype = policy.compute;
  return config;
}

}  // namespace

Trainer::Trainer(const GptConfig& config, Layout layout, const TrainOptions& options,
                 Communicator& comm)
    : model_(WithPolicy(config, PolicyFor(options.precision, config.dtype)), std::move(layout), comm),
      optimizer_(options.lr, options.beta1, options.beta2, options.eps, options.weight_decay),
      options_(options),
      policy_(PolicyFor(options.precision, config.dtype)) {
  if (policy_.loss_scaling) scaler_.emplace(options.loss_scale);
  if (options.micro_batches < 1) ThrowInvalid("options.micro_batches", "must be at least 1");
  if (options.device.kind != comm.device().kind) {
    ThrowInvalid("options.device", kernels::ToString(options.device) + ", but the communicator's buffers are on " +
                                       kernels::ToString(comm.device()));
  }
  optimizer_.set_max_grad_norm(options.max_grad_norm);
  for (const NamedParam& p : model_.params()) {
    const int rank = static_cast<int>(p.value.value().shape().size());
    optimizer_.Add(p.value, model_.layout().State(p.role, rank));
    if (auto grad_layout = model_.layout().GradLayout(p.role, rank)) p.value.set_grad_layout(*grad_layout);
  }
  model_.set_recompute(options.recompute);
  if (options.offload != OffloadKind::kNone) {
    if (comm.device().is_host()) {
      ThrowInvalid("options.offload", "offloads to host memory, and the run is on the host already (use a device)");
    }
    if (options.offload == OffloadKind::kParams && model_.layout().strategy().zero_stage != 3) {
      ThrowInvalid("options.offload", "params: parameters are offloaded as ZeRO-3 shards (use ZeRO stage 3)");
    }
    offload_ = std::make_unique<HostStateHome>();
    optimizer_.set_state_home(offload_.get());
    if (options.offload == OffloadKind::kParams) offload_->StoreParams(model_.params());
  }
}

StepStats Trainer::Step(const BatchSpec& batch, int64_t step, Communicator& comm) {
  if (batch.batch < options_.micro_batches || batch.sequence < 1 ||
      batch.sequence > model_.config().sequence) {
    ThrowInvalid("batch", "needs at least one row per micro-batch and 1 <= sequence <= " +
                              std::to_string(model_.config().sequence));
  }
  const auto start = std::chrono::steady_clock::now();
  const runtime::CommCounters before = comm.counters();
  const OffloadCounters offload_before = offload_ ? offload_->counters() : OffloadCounters{};
  ResetActivationPeak();
  ParamsOnDevice(true);
  kernels::Tensor tokens, labels;
  MakeBatch(batch, model_.config().vocab, step, &tokens, &labels);
  const Layout& layout = model_.layout();

  StepStats stats;
  const int64_t micro = options_.micro_batches;
  for (int64_t m = 0; m < micro; ++m) {
    // Rows [r0, r1) of the batch; each micro-loss is weighted by its share of the rows,
    // so the accumulated gradient is that of the whole batch's mean.
    const int64_t r0 = batch.batch * m / micro, r1 = batch.batch * (m + 1) / micro;
    const int64_t rows = r1 - r0, width = batch.sequence;
    auto rows_of = [&](const kernels::Tensor& all) {
      // `all` is a host tensor (MakeBatch builds it there).
      std::vector<int64_t> v(all.data<int64_t>() + r0 * width, all.data<int64_t>() + r1 * width);
      return Tokens(kernels::Tensor::FromVector({rows, width}, v), layout, comm);
    };
    const std::string label = "step " + std::to_string(step) + " micro-batch " + std::to_string(m);
    comm.SetPhase(label + " forward");
    const Variable loss = model_.Loss(rows_of(tokens), rows_of(labels), comm, step, m);
    const double share = static_cast<double>(rows) / static_cast<double>(batch.batch);
    const Variable weighted =
        micro == 1 ? loss : Apply1("scale", {loss}, MakeAttrs({{"scale", share}}), comm);
    comm.SetPhase(label + " backward");
    // Loss scaling: the backward starts from the scale instead of 1 (the gradient of
    // scale x loss); unscaled below, before the optimizer.
    const DistTensor& w = weighted.value();
    Backward(weighted, ConstantLike(w, DistAttr::Replicated(static_cast<int>(w.shape().size())), loss_scale()),
             comm);
    stats.loss += ReadScalar(*weighted.value().ToGlobal(comm));
  }
  // The loss is global (ToGlobal on every rank): every rank stops here alike, before the
  // update.
  CheckFinite(step, "loss", stats.loss);
  last_grad_bytes_ = 0;
  for (const NamedParam& p : model_.params()) {
    if (p.value.grad()) last_grad_bytes_ += LocalBytes(*p.value.grad());
  }
  comm.SetPhase("step " + std::to_string(step) + " optimizer");
  stats.loss_scale = loss_scale();
  if (stats.loss_scale != 1) {
    // Unscaled in float32 on each rank's (possibly partial) shard: 1 / scale is a power of
    // two, so this is exact and commutes with the reduction the optimizer does next.
    for (const NamedParam& p : model_.params()) {
      if (p.value.grad()) p.value.SetGrad(ScaleLocal(*p.value.grad(), 1 / stats.loss_scale));
    }
  }
  // A non-finite norm: the optimizer applied nothing (train/optimizer.h).
  optimizer_.Step(comm);
  stats.grad_norm = optimizer_.last_grad_norm();
  ParamsOnDevice(false);
  if (scaler_) {
    // The norm is the whole model's, the same on every rank: every rank skips alike.
    stats.skipped = !std::isfinite(stats.grad_norm);
    if (!scaler_->Update(!stats.skipped)) {
      char floor[32];
      std::snprintf(floor, sizeof floor, "%g", options_.loss_scale.min_scale);
      CheckFinite(step, std::string("gradient norm (loss scale below ") + floor + ")", stats.grad_norm);
    }
  } else {
    CheckFinite(step, "gradient norm", stats.grad_norm);  // the whole model's, on every rank
  }
  const runtime::CommCounters& after = comm.counters();
  stats.bytes_sent = Sum(after, true) - Sum(before, true);
  stats.bytes_received = Sum(after, false) - Sum(before, false);
  stats.activation_peak_bytes = ActivationBytes().peak_bytes;
  if (offload_) {
    stats.offload_to_device = offload_->counters().host_to_device - offload_before.host_to_device;
    stats.offload_to_host = offload_->counters().device_to_host - offload_before.device_to_host;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

double Trainer::Evaluate(const kernels::Tensor& tokens, const kernels::Tensor& labels,
                         int64_t step, Communicator& comm) {
  if (model_.config().dropout > 0) {
    ThrowInvalid("config.dropout", "evaluation needs a model without dropout (Loss drops)");
  }
  NoGradGuard no_grad;
  const Layout& layout = model_.layout();
  auto shard = [&](const kernels::Tensor& all) { return Tokens(ToHostTensor(all), layout, comm); };
  comm.SetPhase("step " + std::to_string(step) + " evaluation");
  ParamsOnDevice(true);
  const double loss = ReadScalar(*model_.Loss(shard(tokens), shard(labels), comm, step).value().ToGlobal(comm));
  ParamsOnDevice(false);
  CheckFinite(step, "validation loss", loss);
  return loss;
}

void Trainer::ParamsOnDevice(bool on) const {
  if (!offload_ || options_.offload != OffloadKind::kParams) return;
  if (on) {
    offload_->FetchParams(model_.params());
  } else {
    offload_->StoreParams(model_.params());
  }
}

std::vector<std::vector<double>> Trainer::GatherParams(Communicator& comm) const {
  ParamsOnDevice(true);
  std::vector<std::vector<double>> out;
  for (const NamedParam& p : model_.params()) {
    const std::optional<kernels::Tensor> g = p.value.value().ToGlobal(comm);
    std::vector<double> values;
    if (g) {
      const kernels::Tensor host = ToHostTensor(*g);
      for (int64_t i = 0; i < host.numel(); ++i) values.push_back(ReadScalar(host, i));
    }
    out.push_back(std::move(values));
  }
  ParamsOnDevice(false);
  return out;
}

int64_t Trainer::ParamBytes() const {
  int64_t bytes = 0;
  for (const NamedParam& p : model_.params()) bytes += LocalBytes(p.value.value());
  return bytes;
}

int64_t Trainer::GradBytes() const { return last_grad_bytes_; }

}  // namespace spmd::train
