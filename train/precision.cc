#include "train/precision.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "runtime/exec/dispatch.h"

namespace spmd::train {

using runtime::Communicator;
using runtime::DistTensor;

namespace {

// The mixed-precision loss bounds c * u * growth^step (docs/TRAINING.md "Mixed precision":
// derivation and measurements).
constexpr double kGrowth = 1.2;
constexpr double kSamePrecisionUnits = 1;
constexpr double kFloat64Units = 2;

}  // namespace

std::string_view ToString(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16Mixed: return "bf16-mixed";
    case Precision::kFp16Mixed: return "fp16-mixed";
  }
  return "fp32";
}

Precision ParsePrecision(const std::string& text, const std::string& field) {
  for (Precision p : {Precision::kFp32, Precision::kBf16Mixed, Precision::kFp16Mixed}) {
    if (text == ToString(p)) return p;
  }
  ThrowInvalid(field, "'" + text + "' is not fp32, bf16-mixed or fp16-mixed");
}

PrecisionPolicy PolicyFor(Precision precision, DType model_dtype) {
  if (precision == Precision::kFp32) return {model_dtype, model_dtype, model_dtype, false};
  if (model_dtype != DType::kFloat32) {
    ThrowInvalid("options.precision", std::string(ToString(precision)) +
                                          " keeps float32 master weights: the model's dtype must be float32, not " +
                                          std::string(ToString(model_dtype)));
  }
  if (precision == Precision::kBf16Mixed) return {DType::kFloat32, DType::kBFloat16, DType::kFloat32, false};
  return {DType::kFloat32, DType::kFloat16, DType::kFloat32, true};
}

double MixedBounds::Loss(double c, int64_t step) const {
  return c * unit_roundoff * std::pow(growth, static_cast<double>(step));
}

MixedBounds MixedBoundsFor(Precision precision) {
  if (precision == Precision::kFp32) ThrowInvalid("precision", "fp32 has no mixed-precision bounds");
  MixedBounds b;
  b.unit_roundoff = precision == Precision::kBf16Mixed ? 0x1p-8 : 0x1p-11;
  b.growth = kGrowth;
  b.same_precision = kSamePrecisionUnits;
  b.float64 = kFloat64Units;
  return b;
}

double AdamWDriftBound(double lr, double beta1, double beta2, int64_t steps) {
  double total = 0, geometric = 0, ratio_power = 1;
  for (int64_t t = 1; t <= steps; ++t) {
    geometric += ratio_power;  // sum_{j<t} (b1^2 / b2)^j
    ratio_power *= beta1 * beta1 / beta2;
    const double td = static_cast<double>(t);
    const double k = (1 - beta1) / (1 - std::pow(beta1, td)) * std::sqrt((1 - std::pow(beta2, td)) / (1 - beta2)) *
                     std::sqrt(geometric);
    total += 2 * lr * k;
  }
  return total;
}

// ---- LossScaler ---------------------------------------------------------------------------

namespace {

bool PowerOfTwo(double x) {
  if (!(x > 0) || !std::isfinite(x)) return false;
  int exponent = 0;
  return std::frexp(x, &exponent) == 0.5;
}

}  // namespace

LossScaler::LossScaler(const LossScaleOptions& options) : options_(options), scale_(options.initial) {
  const std::pair<const char*, double> powers[] = {{"loss_scale.initial", options.initial},
                                                   {"loss_scale.growth", options.growth},
                                                   {"loss_scale.backoff", options.backoff},
                                                   {"loss_scale.min_scale", options.min_scale}};
  for (const auto& [field, value] : powers) {
    if (!PowerOfTwo(value)) ThrowInvalid(field, std::to_string(value) + " is not a positive power of two");
  }
  if (!(options.growth > 1)) ThrowInvalid("loss_scale.growth", "must be above 1");
  if (!(options.backoff < 1)) ThrowInvalid("loss_scale.backoff", "must be below 1");
  if (options.growth_interval < 1) ThrowInvalid("loss_scale.growth_interval", "must be at least 1");
  if (options.initial > 0x1p64) {  // the loss's cotangent is float32 (its largest: 2^128)
    ThrowInvalid("loss_scale.initial", std::to_string(options.initial) + " is above 2^64");
  }
  if (options.initial < options.min_scale) {
    ThrowInvalid("loss_scale.initial", std::to_string(options.initial) + " is below the floor " +
                                           std::to_string(options.min_scale));
  }
}

bool LossScaler::Update(bool finite) {
  if (finite) {
    if (++good_steps_ == options_.growth_interval) {
      good_steps_ = 0;
      if (scale_ * options_.growth <= 0x1p64) scale_ *= options_.growth;
    }
    return true;
  }
  good_steps_ = 0;
  ++skipped_;
  scale_ *= options_.backoff;
  return scale_ >= options_.min_scale;
}

// ---- Local elementwise maps ---------------------------------------------------------------

namespace {

// `op` (an elementwise op) run on this rank's shard of `t` alone, the result wrapped with
// t's dist attr: no collective, whatever the layout.
DistTensor MapLocal(const DistTensor& t, const char* op, const Attrs& attrs, DType out_dtype) {
  if (!t.has_local()) {
    return DistTensor::Absent(t.shape(), out_dtype, t.mesh(), t.dist_attr(), t.process_id());
  }
  const Attrs normalized = FindOp(op)->NormalizeAttrs(attrs);
  kernels::Tensor local =
      std::move(kernels::BackendFor(t.local().device()).RunKernel(op, kernels::TensorArgs(std::vector<const kernels::Tensor*>{&t.local()}), normalized)[0]);
  return DistTensor::FromLocal(std::move(local), t.shape(), out_dtype, t.mesh(), t.dist_attr(), t.process_id());
}

DistTensor CastLocal(const DistTensor& t, DType to) {
  return MapLocal(t, "cast", notation::MakeAttrs({{"dtype", std::string(ToString(to))}}), to);
}

// Whether casting `from` to `to` loses nothing (every value of `from` is one of `to`).
bool Widens(DType from, DType to) {
  if (from == to || to == DType::kFloat64) return true;
  return to == DType::kFloat32 && IsTwoByteFloat(from);
}

}  // namespace

DistTensor ScaleLocal(const DistTensor& t, double factor) {
  return MapLocal(t, "scale", notation::MakeAttrs({{"scale", factor}, {"bias", 0.0}}), t.dtype());
}

Variable CastVariable(const Variable& x, DType to, Communicator& comm) {
  const DistTensor& value = x.value();
  const DType from = value.dtype();
  if (from == to) return x;
  // Narrowing a partial value: reduce it first, in its own dtype (Dispatch does).
  DistTensor out = value.dist_attr().IsPartial() && !Widens(from, to)
                       ? std::move(runtime::Dispatch("cast", {value},
                                                     notation::MakeAttrs({{"dtype", std::string(ToString(to))}}),
                                                     comm)[0])
                       : CastLocal(value, to);
  std::vector<DistTensor> outputs;
  outputs.push_back(std::move(out));
  return ApplyFunction(
      "cast to " + std::string(ToString(to)), {x}, std::move(outputs),
      [from](const std::vector<DistTensor>& cotangents, Communicator& comm) {
        // The cotangent as it arrived (partial included), widened shard by shard; one to
        // be narrowed is reduced first, in its own (wider) dtype.
        const DistTensor& g = cotangents[0];
        if (g.dist_attr().IsPartial() && !Widens(g.dtype(), from)) {
          DistAttr whole = g.dist_attr();
          whole.partial.clear();
          return std::vector<std::optional<DistTensor>>{CastLocal(g.Reshard(whole, comm), from)};
        }
        return std::vector<std::optional<DistTensor>>{CastLocal(g, from)};
      },
      CotangentLayout::kAsArrived)[0];
}

}  // namespace spmd::train
