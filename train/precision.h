// Mixed-precision training: which dtype each tensor of a step has, and fp16 loss scaling.
//
// A policy names three dtypes, as PyTorch FSDP's MixedPrecision does:
//   param   the master weights and AdamW's moments (what the optimizer updates);
//   compute the forward and backward: each use of a parameter is a cast copy of its master
//           (CastVariable), so activations and their gradients are in this dtype;
//   reduce  every reduction of a parameter's gradient (data-parallel all-reduce, ZeRO
//           reduce-scatter, the gradient norm): the compute-dtype gradient is cast to this
//           dtype on the shard it was computed on, before any collective sees it.
// As torch.autocast, some ops stay in float32 (the param dtype): the logits are cast to
// float32 before softmax cross-entropy (the loss is float32), and LayerNorm / RMSNorm run in
// float32 on the master scale and bias. docs/TRAINING.md "Mixed precision".
//
//   fp32        param = compute = reduce = the model's dtype (float32 or float64): today's
//               single-dtype training, unchanged.
//   bf16-mixed  float32 / bfloat16 / float32; no loss scaling (bfloat16 has float32's range).
//   fp16-mixed  float32 / float16 / float32 with dynamic loss scaling (LossScaler).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rules/model/dtype.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "train/autograd.h"

namespace spmd::train {

enum class Precision { kFp32, kBf16Mixed, kFp16Mixed };

// "fp32", "bf16-mixed", "fp16-mixed".
std::string_view ToString(Precision precision);
// The precision named `text`; InvalidArgument naming `field` otherwise.
Precision ParsePrecision(const std::string& text, const std::string& field);

struct PrecisionPolicy {
  DType param = DType::kFloat32;
  DType compute = DType::kFloat32;
  DType reduce = DType::kFloat32;
  bool loss_scaling = false;
};

// The policy of `precision` for a model of `model_dtype` (fp32: every dtype is the
// model's). The mixed precisions need float32 master weights: InvalidArgument
// ("options.precision") when `model_dtype` is not float32.
PrecisionPolicy PolicyFor(Precision precision, DType model_dtype);

// torch.cuda.amp.GradScaler's dynamic loss scaling. The loss is multiplied by scale() before
// the backward and the gradients by 1 / scale() (in float32) before the optimizer. A step
// whose gradients are not all finite is skipped (no update) and the scale multiplied by
// `backoff`; after `growth_interval` finite steps in a row it is multiplied by `growth`.
// The scale and both factors are powers of two, so scaling and unscaling are exact.
struct LossScaleOptions {
  double initial = 65536;        // 2^16, GradScaler's default
  double growth = 2;
  double backoff = 0.5;
  int64_t growth_interval = 2000;  // GradScaler's default
  // A skipped step that takes the scale below this is a NonFiniteError: the gradients
  // are not finite however small the scale, so training has diverged.
  double min_scale = 1;
};

class LossScaler {
 public:
  // InvalidArgument naming the field ("loss_scale.initial", ...) when a scale or factor is
  // not a positive power of two (growth above 1, backoff below 1), the interval is below 1,
  // or the initial scale is below the floor or above 2^64 (the scale never grows past it).
  explicit LossScaler(const LossScaleOptions& options);

  double scale() const { return scale_; }
  int64_t skipped() const { return skipped_; }
  // After a step's gradients were checked: finite, counts a good step (and grows the scale
  // after growth_interval of them); not finite, counts a skipped step and backs the scale
  // off. Returns false when the new scale is below min_scale (the caller stops training).
  bool Update(bool finite);

 private:
  LossScaleOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

// What spmd-train --verify (and the tests) allow between two mixed-precision runs of the
// same model, batches and steps (docs/TRAINING.md "Mixed precision": derivation and the
// measured differences).
//   Losses: at step t (0-based) the loss difference relative to the reference loss is at
//   most c * u * growth^t, u the compute dtype's unit roundoff: the first forward differs by
//   a few roundings of the logits, and training then amplifies a difference by about
//   `growth` per step (measured 1.15-1.16 at lr 1e-2, the same in float32 against float64).
//   c = same_precision for a distributed run against one process in the same precision,
//   c = float64 for a run against one process in float64.
//   Parameters: no bound at the level of u holds (a parameter whose exact gradient is 0, an
//   attention key's bias, gets rounding noise for a gradient, and AdamW turns any noise into
//   steps of about lr), so they are held to AdamWDriftBound, which holds for any gradients.
struct MixedBounds {
  double unit_roundoff = 0;  // 2^-8 bfloat16, 2^-11 float16
  double growth = 1.2;
  double same_precision = 1;
  double float64 = 2;
  // c * u * growth^step.
  double Loss(double c, int64_t step) const;
};
// InvalidArgument ("precision") for fp32 (its bounds are the dtype's: 1e-9 / 1e-3).
MixedBounds MixedBoundsFor(Precision precision);

// The largest difference of one parameter element between two AdamW runs (options' lr, betas,
// weight decay) of `steps` steps from the same parameters, whatever their gradients:
// sum over t of 2 lr K_t, K_t = (1 - b1) / (1 - b1^t) sqrt((1 - b2^t) / (1 - b2))
// sqrt(sum_{j<t} (b1^2 / b2)^j), the bound on |m_hat / sqrt(v_hat)| (Cauchy-Schwarz); weight
// decay only shrinks a difference.
double AdamWDriftBound(double lr, double beta1, double beta2, int64_t steps);

// `x` cast to `to`, as a recorded step: its backward casts the cotangent back to x's dtype.
// Both directions cast each rank's own shard and keep the dist attr (a partial cotangent
// stays partial: the widening cast of each addend is exact), so a compute-dtype gradient
// reaches the collectives that reduce it only after it is widened. Narrowing a partial
// value would round each addend: a partial `x` is reduced first (in x's dtype). `x`
// itself when it already has the dtype.
Variable CastVariable(const Variable& x, DType to, runtime::Communicator& comm);

// `t` with every element multiplied by `factor` on this rank's shard, the dist attr kept
// (exact for a power of two; linear, so right for partial addends too): the unscaling of
// loss-scaled gradients.
runtime::DistTensor ScaleLocal(const runtime::DistTensor& t, double factor);

}  // namespace spmd::train
