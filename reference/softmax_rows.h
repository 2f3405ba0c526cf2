// softmax along one axis of a reference tensor, shared by the softmax family
// (reference/ops_softmax.cc) and the softmax cross entropies (reference/ops_loss.cc).
#pragma once

#include <cmath>
#include <limits>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/model/attrs.h"

namespace spmd::reference::ops::rows {

// softmax of x along the dim that `view` describes, written into a tensor of x's shape.
inline Tensor SoftmaxAlong(const Tensor& x, const internal::AxisView& view) {
  Tensor out = internal::Zeros(x.shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t a = 0; a < view.len; ++a) {
        double v = x.data[view.At(o, a, i)];
        if (v > m) m = v;
      }
      double s = 0.0;
      for (int64_t a = 0; a < view.len; ++a) s += std::exp(x.data[view.At(o, a, i)] - m);
      for (int64_t a = 0; a < view.len; ++a) {
        out.data[view.At(o, a, i)] = std::exp(x.data[view.At(o, a, i)] - m) / s;
      }
    }
  }
  return out;
}

inline internal::AxisView ViewFromAxisAttr(const Tensor& x, const Attrs& attrs) {
  int64_t axis =
      internal::NormalizeAxisOrScalar(attrs.GetInt("axis"), internal::Rank(x), "attrs.axis");
  return internal::ViewAlong(x.shape, axis);
}

}  // namespace spmd::reference::ops::rows
