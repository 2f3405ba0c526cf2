// The plans of the normalisations (rules/ops/norm.cc): attr reads, typed validation and
// output shapes of layer_norm, rms_norm, layer_norm_grad and rms_norm_grad, written once for
// the rules, the references (reference/ops_norm.cc), the CPU kernels (kernels/cpu/norm.cc)
// and the CUDA kernels (kernels/cuda/norm.cu), which keep only their loops. Header-only; no
// value arithmetic.
//
// Example: layer_norm of x [4, 6, 8] with begin_norm_axis 1 -> rows 4, n 48, scale and
// bias [48], mean and variance [4]; begin_norm_axis -2 is the same split.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

// layer_norm / rms_norm and their grads: x split at begin_norm_axis into [outer, n].
struct NormSplit {
  int64_t begin = 0;
  int64_t outer = 1;
  int64_t n = 1;
  Shape stats_shape;  // x.shape[:begin]: mean, variance, invvar
};

inline NormSplit SplitForNorm(const Shape& x, int64_t begin_norm_axis) {
  NormSplit split;
  const auto rank = static_cast<int64_t>(x.size());
  split.begin = shape::NormalizeAxis(begin_norm_axis, rank, "attrs.begin_norm_axis");
  for (int64_t d = 0; d < rank; ++d) {
    if (d < split.begin) {
      split.outer *= x[d];
      split.stats_shape.push_back(x[d]);
    } else {
      split.n *= x[d];
    }
  }
  if (split.n == 0) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "normalising over an empty set of elements of " + shape::ShapeString(x));
  }
  return split;
}

// epsilon of the normalisations: finite and >= 0 (a negative one makes the root of a
// constant row's variance NaN).
inline void CheckNormEpsilon(const Attrs& attrs) {
  const double epsilon = attrs.GetFloat("epsilon");
  if (!std::isfinite(epsilon) || epsilon < 0.0) {
    ThrowInvalid("attrs.epsilon", "must be finite and >= 0, got " + std::to_string(epsilon));
  }
}

// layer_norm (x, scale, bias; params 2) or rms_norm (x, scale; params 1): epsilon and
// begin_norm_axis read, the parameters [n].
inline NormSplit PlanNorm(const Shapes& shapes, const Attrs& attrs, size_t params) {
  CheckNormEpsilon(attrs);
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  CheckArity(shapes, 1 + params);
  NormSplit split = SplitForNorm(shapes[0], begin_norm_axis);
  for (size_t p = 1; p <= params; ++p) {
    if (shapes[p] != Shape{split.n}) {
      ThrowInvalid(shape::InputField(p, "shape"),
                   "expected [" + std::to_string(split.n) + "], got " + shape::ShapeString(shapes[p]));
    }
  }
  return split;
}

// layer_norm_grad (params 2, statistics 2) / rms_norm_grad (1, 1): x, the parameters, the
// statistics, out_grad (shape::CheckNormGradShapes).
inline NormSplit PlanNormGrad(const Shapes& shapes, const Attrs& attrs, size_t params, size_t statistics) {
  CheckNormEpsilon(attrs);
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  CheckArity(shapes, 2 + params + statistics);
  NormSplit split = SplitForNorm(shapes[0], begin_norm_axis);
  shape::CheckNormGradShapes(shapes, split.begin, params, statistics);
  return split;
}

}  // namespace spmd::plan
