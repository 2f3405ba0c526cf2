// dropout's attrs and localized layout (bernoulli's and poisson's too), read and validated once for the rule, the
// reference and the kernels (header-only, as rules/engine/shape_util.h: it holds validation and
// no value arithmetic, so all three refuse the same requests with the same error type and
// field while the values stay computed independently).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"
#include "rules/ops/counter_rng.h"

namespace spmd::dropout {

inline constexpr const char* kUpscaleInTrain = "upscale_in_train";
inline constexpr const char* kDownscaleInInfer = "downscale_in_infer";

struct DropoutAttrs {
  double p = 0.5;        // the probability of dropping an element, in [0, 1]
  bool is_test = false;  // inference: nothing is dropped
  bool upscale = true;   // upscale_in_train (kept / (1 - p) in training) or downscale_in_infer
  int64_t seed = 0;
};

// Reads normalised attrs (every declared attr present). Throws
// SpmdError(kInvalidArgument) naming attrs.p (outside [0, 1]) or attrs.mode (another mode).
inline DropoutAttrs ReadDropoutAttrs(const Attrs& attrs) {
  DropoutAttrs a;
  a.p = attrs.GetFloat("p");
  if (!(a.p >= 0.0 && a.p <= 1.0)) {
    ThrowInvalid("attrs.p", "the dropout probability must be in [0, 1], got " + std::to_string(a.p));
  }
  const std::string& mode = attrs.GetString("mode");
  if (mode != kUpscaleInTrain && mode != kDownscaleInInfer) {
    ThrowInvalid("attrs.mode", "mode must be \"upscale_in_train\" or \"downscale_in_infer\"");
  }
  a.upscale = mode == kUpscaleInTrain;
  a.is_test = attrs.GetBool("is_test");
  a.seed = attrs.GetInt("seed");
  return a;
}

// bernoulli's input: each element a probability in [0, 1] (NaN refused), as Paddle's
// kernel checks; else SpmdError(kInvalidArgument) naming inputs[0].data.
inline void CheckProbability(double v) {
  if (!(v >= 0.0 && v <= 1.0)) {
    ThrowInvalid("inputs[0].data", "a bernoulli probability must be in [0, 1], got " + std::to_string(v));
  }
}

// poisson's input: each element a rate in [0, counter_rng::kMaxPoissonRate]: NaN, infinity
// and a negative rate are InvalidArgument naming inputs[0].data (no distribution has them); a
// finite rate above the limit is Unsupported (counter_rng::PoissonCount's inversion).
inline void CheckPoissonRate(double v) {
  if (!(v >= 0.0) || std::isinf(v)) {
    ThrowInvalid("inputs[0].data", "a poisson rate must be finite and >= 0, got " + std::to_string(v));
  }
  if (v > counter_rng::kMaxPoissonRate) {
    ThrowUnsupported("inputs[0].data", "a poisson rate above " + std::to_string(counter_rng::kMaxPoissonRate) +
                                           " is not drawn (the inversion's exp(-rate) would underflow), got " +
                                           std::to_string(v));
  }
}

// Where a tensor of `local` shape sits in the global tensor whose mask it draws: the
// localized local.offset and local.global_shape (both absent: the tensor is the whole one).
struct DropoutLayout {
  std::vector<int64_t> offset;        // per dim, the global index of the local element 0
  std::vector<int64_t> global_shape;
};

// Throws SpmdError(kInvalidArgument) naming local.offset or local.global_shape when
// only one is given, a length is not the rank, an offset is negative or the local block
// does not fit in the global shape (so every global index is below 2^62).
inline DropoutLayout ReadDropoutLayout(const Attrs& attrs, const std::vector<int64_t>& local) {
  const std::string offset_field = std::string(LocalFieldName(LocalField::kOffset));
  const std::string global_field = std::string(LocalFieldName(LocalField::kGlobalShape));
  DropoutLayout layout;
  const bool has_offset = attrs.local().offset.has_value(), has_global = attrs.local().global_shape.has_value();
  if (!has_offset && !has_global) {
    layout.offset.assign(local.size(), 0);
    layout.global_shape = local;
    return layout;
  }
  if (!has_offset) ThrowInvalid(offset_field, "missing while " + global_field + " is given");
  if (!has_global) ThrowInvalid(global_field, "missing while " + offset_field + " is given");
  layout.offset = *attrs.local().offset;
  layout.global_shape = *attrs.local().global_shape;
  if (layout.offset.size() != local.size()) {
    ThrowInvalid(offset_field, "has " + std::to_string(layout.offset.size()) + " entries for rank " +
                                   std::to_string(local.size()));
  }
  if (layout.global_shape.size() != local.size()) {
    ThrowInvalid(global_field, "has " + std::to_string(layout.global_shape.size()) +
                                   " entries for rank " + std::to_string(local.size()));
  }
  constexpr int64_t kMaxElements = int64_t{1} << 62;
  int64_t product = 1;
  for (size_t d = 0; d < local.size(); ++d) {
    const int64_t g = layout.global_shape[d], o = layout.offset[d];
    if (g < 0) ThrowInvalid(global_field, "negative dim in " + shape::ShapeString(layout.global_shape));
    if (o < 0) ThrowInvalid(offset_field, "negative offset in " + shape::ShapeString(layout.offset));
    if (o > g || local[d] > g - o) {
      ThrowInvalid(offset_field, "a block of " + shape::ShapeString(local) + " at " +
                                     shape::ShapeString(layout.offset) + " leaves the global shape " +
                                     shape::ShapeString(layout.global_shape));
    }
    if (g != 0 && product <= kMaxElements) product = product > kMaxElements / g ? kMaxElements + 1 : product * g;
  }
  if (product > kMaxElements) {
    ThrowInvalid(global_field, "more than 2^62 elements in " + shape::ShapeString(layout.global_shape));
  }
  return layout;
}

}  // namespace spmd::dropout
