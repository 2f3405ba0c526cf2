// One training loop: the GPT (train/gpt.h), AdamW (train/optimizer.h) with each
// parameter's states where the layout puts them, a synthetic corpus, and per-step
// statistics (loss, tokens, bytes moved by this rank, time).
//
// The corpus is generated, not shipped: sequences of a fixed affine recurrence modulo the
// vocabulary, t[i+1] = (5 t[i] + 3 + (i % 2)) mod V, from a start drawn by a counter-based
// generator from (seed, step, row). A model can learn it, so the loss falls; every rank
// builds the same global batch and keeps its own shard (Layout::Tokens), so the data does
// not depend on the layout.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/dist_tensor.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/optimizer.h"

namespace spmd::train {

struct BatchSpec {
  int64_t batch = 4;     // sequences per step (global)
  int64_t sequence = 8;  // tokens per sequence (<= the model's)
  uint64_t seed = 1;
};

struct TrainOptions {
  double lr = 1e-2;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  double max_grad_norm = 1.0;  // 0: no clipping
  int micro_batches = 1;       // gradient accumulation: the batch split along dim 0
};

struct StepStats {
  double loss = 0;              // the mean over the whole batch
  double grad_norm = 0;         // before clipping
  int64_t bytes_sent = 0;       // by this rank during the step (counters)
  int64_t bytes_received = 0;
  double seconds = 0;           // wall time of the step on this rank
};

// The global tokens and labels of a step, int64 [batch, sequence] each (labels: the next
// token of the recurrence).
void MakeBatch(const BatchSpec& spec, int64_t vocab, int64_t step, kernels::Tensor* tokens,
               kernels::Tensor* labels);

class Trainer {
 public:
  // Throws InvalidArgument ("options.micro_batches") when it is below 1.
  Trainer(const GptConfig& config, Layout layout, const TrainOptions& options,
          runtime::Communicator& comm);

  // One optimizer step on the batch of `step`. Throws InvalidArgument ("batch") when the
  // batch has fewer rows than micro-batches or a sequence longer than the model's.
  StepStats Step(const BatchSpec& batch, int64_t step, runtime::Communicator& comm);

  // Every parameter's global value (float64), in the model's order; collective.
  std::vector<std::vector<double>> GatherParams(runtime::Communicator& comm) const;

  Gpt& model() { return model_; }
  AdamW& optimizer() { return optimizer_; }
  // The bytes this rank holds for parameters, and for gradients after the last backward.
  int64_t ParamBytes() const;
  int64_t GradBytes() const;

 private:
  Gpt model_;
  AdamW optimizer_;
  TrainOptions options_;
  int64_t last_grad_bytes_ = 0;
};

}  // namespace spmd::train
