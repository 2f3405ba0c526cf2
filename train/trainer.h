// One training loop: the GPT (train/gpt.h), AdamW (train/optimizer.h) with each
// parameter's states where the layout puts them, a synthetic corpus, and per-step
// statistics (loss, tokens, bytes moved by this rank, time).
//
// The corpus is generated, not shipped: sequences of a fixed affine recurrence modulo the
// vocabulary, t[i+1] = (5 t[i] + 3 + (i % 2)) mod V, from a start drawn by a counter-based
// generator from (seed, step, row). A model can learn it, so the loss falls; every rank
// builds the same global batch and keeps its own shard (Layout::Tokens), so the data does
// not depend on the layout. With BatchSpec::corpus the batch is windows of a token file
// instead (train/data.h), drawn from (seed, step, row) alike.
//
// Non-finite values are errors, not training: a step whose loss or gradient norm is NaN
// or infinite throws NonFiniteError naming the step (`step 3: loss is nan`). Both values
// are reduced over every rank before the check, so every rank throws at the same point,
// after the same collectives: none is left waiting.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "rules/model/error.h"
#include "train/offload.h"
#include "train/optimizer.h"
#include "train/precision.h"

namespace spmd::train {

class TokenCorpus;  // train/data.h

struct BatchSpec {
  int64_t batch = 4;     // sequences per step (global)
  int64_t sequence = 8;  // tokens per sequence (<= the model's)
  uint64_t seed = 1;
  // Where the tokens come from: null, the generated recurrence; else windows of this
  // corpus's training split (not owned: it outlives the steps).
  const TokenCorpus* corpus = nullptr;
};

// A loss or gradient norm that is NaN or infinite: InvalidArgument with the field
// "step N", e.g. `step 3: loss is nan` (what the run was given, a learning rate or data,
// made training diverge). Thrown on every rank alike.
class NonFiniteError : public SpmdError {
 public:
  NonFiniteError(int64_t step, const std::string& what, double value);
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

// Throws NonFiniteError(step, what, value) when `value` is not finite.
void CheckFinite(int64_t step, const std::string& what, double value);

struct TrainOptions {
  double lr = 1e-2;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  double max_grad_norm = 1.0;  // 0: no clipping
  int micro_batches = 1;       // gradient accumulation: the batch split along dim 0
  // Where parameters, gradients, optimizer states, activations and tokens live
  // (train/device.h). The communicator must hand buffers of this kind of device (its
  // device() and stream() are used: a sim or CUDA communicator per rank, or a staged one
  // under MPI, runtime/comm/staged_communicator.h); the Trainer throws InvalidArgument
  // ("options.device") otherwise.
  kernels::Device device;
  // Activation recompute (Gpt::set_recompute): each block keeps only its input and runs
  // again in the backward; bitwise the same training, fewer activation bytes.
  bool recompute = false;
  // Offload (train/offload.h): AdamW's moments (kOptimizer), and with ZeRO-3 also the
  // parameter shards (kParams), in host memory between uses; bitwise the same training.
  // Needs a device: InvalidArgument ("options.offload") on the host, and for kParams
  // without ZeRO-3; Unsupported ("options.offload") with pipeline stages.
  OffloadKind offload = OffloadKind::kNone;
  // Mixed precision (train/precision.h): fp32 trains in the model's dtype; bf16-mixed and
  // fp16-mixed need a float32 model (InvalidArgument "options.precision" otherwise) and
  // keep float32 masters and AdamW states, computing in bfloat16 / float16. fp16-mixed
  // scales the loss (loss_scale, InvalidArgument "loss_scale.*" for bad values) and skips a
  // step whose gradients are not finite instead of throwing.
  Precision precision = Precision::kFp32;
  LossScaleOptions loss_scale;
};

struct StepStats {
  double loss = 0;              // the mean over the whole batch
  double grad_norm = 0;         // before clipping
  int64_t bytes_sent = 0;       // by this rank during the step (counters)
  int64_t bytes_received = 0;
  double seconds = 0;           // wall time of the step on this rank
  int64_t activation_peak_bytes = 0;  // the most activation bytes alive (ActivationBytes)
  int64_t offload_to_device = 0;      // bytes of optimizer states copied up (offload)
  int64_t offload_to_host = 0;        // ... and down
  // fp16-mixed: the loss scale the step ran with, and whether its gradients were not
  // finite, so it applied no update (grad_norm is then that non-finite norm).
  double loss_scale = 1;
  bool skipped = false;
};

// The global tokens and labels of a step, int64 [batch, sequence] each (labels: the next
// token of the recurrence, or of the corpus). With spec.corpus: InvalidArgument
// ("batch.corpus") when a token of the corpus is not below `vocab`.
void MakeBatch(const BatchSpec& spec, int64_t vocab, int64_t step, kernels::Tensor* tokens,
               kernels::Tensor* labels);

class Trainer {
 public:
  // Throws InvalidArgument ("options.micro_batches") when it is below 1.
  Trainer(const GptConfig& config, Layout layout, const TrainOptions& options,
          runtime::Communicator& comm);

  // One optimizer step on the batch of `step`. Throws InvalidArgument ("batch") when the
  // batch has fewer rows than micro-batches or a sequence longer than the model's, and
  // NonFiniteError when the loss (before the update: the parameters are left as they
  // were) or the gradient norm (after it) is not finite. With loss scaling (fp16-mixed) a
  // non-finite gradient norm skips the step instead (no parameter or optimizer state
  // changes, the scale backs off, StepStats::skipped) unless the scale falls below its
  // floor: then NonFiniteError ("step N: gradient norm (loss scale below 1) is inf").
  StepStats Step(const BatchSpec& batch, int64_t step, runtime::Communicator& comm);

  // The mean loss of the model on global int64 [B, S] tokens and labels, forward only (no
  // graph, no update; collective). InvalidArgument ("config.dropout") when the model has
  // dropout (Loss would drop); NonFiniteError("step N: validation loss ...") when the
  // loss is not finite. `step` names the step in errors and phases.
  double Evaluate(const kernels::Tensor& tokens, const kernels::Tensor& labels, int64_t step,
                  runtime::Communicator& comm);

  // Every parameter's global value (float64), in the model's order; collective.
  std::vector<std::vector<double>> GatherParams(runtime::Communicator& comm) const;

  Gpt& model() { return model_; }
  AdamW& optimizer() { return optimizer_; }
  // The bytes this rank holds for parameters, and for gradients after the last backward.
  int64_t ParamBytes() const;
  int64_t GradBytes() const;
  // The optimizer-state offload's counters; null without offload.
  const HostStateHome* offload() const { return offload_.get(); }
  const PrecisionPolicy& policy() const { return policy_; }
  // fp16-mixed: the current loss scale and the steps skipped so far (1 and 0 otherwise).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1; }
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped() : 0; }

 private:
  Gpt model_;
  AdamW optimizer_;
  TrainOptions options_;
  PrecisionPolicy policy_;
  std::optional<LossScaler> scaler_;
  int64_t last_grad_bytes_ = 0;
  std::unique_ptr<HostStateHome> offload_;
  // --offload params: the parameters to their device (on) or to the host (off).
  void ParamsOnDevice(bool on) const;
};

}  // namespace spmd::train
