// The softmax family: softmax, log_softmax, softmax_grad (docs/OPS.md "Softmax").
#include <cmath>
#include <limits>

#include "reference/reference.h"
#include "reference/softmax_rows.h"
#include "reference/util.h"
#include "rules/ops/softmax_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::AxisView;
using internal::CheckArity;
using rows::SoftmaxAlong;
using rows::ViewFromAxisAttr;

}  // namespace

Tensors softmax(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  AxisView view = ViewFromAxisAttr(inputs[0], attrs);
  return {SoftmaxAlong(inputs[0], view)};
}

Tensors log_softmax(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  AxisView view = ViewFromAxisAttr(x, attrs);
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
        out.data[view.At(o, a, i)] = x.data[view.At(o, a, i)] - m - std::log(s);
      }
    }
  }
  return {out};
}

Tensors softmax_grad(const Tensors& inputs, const Attrs& attrs) {
  plan::PlanSoftmaxGrad(plan::ShapesOf(inputs));
  const Tensor& out = inputs[0];
  const Tensor& out_grad = inputs[1];
  AxisView view = ViewFromAxisAttr(out, attrs);
  Tensor x_grad = internal::Zeros(out.shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double dot = 0.0;
      for (int64_t a = 0; a < view.len; ++a) {
        dot += out_grad.data[view.At(o, a, i)] * out.data[view.At(o, a, i)];
      }
      for (int64_t a = 0; a < view.len; ++a) {
        int64_t at = view.At(o, a, i);
        x_grad.data[at] = out.data[at] * (out_grad.data[at] - dot);
      }
    }
  }
  return {x_grad};
}

}  // namespace spmd::reference::ops
