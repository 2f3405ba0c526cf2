// Reductions, argmax and cumsum (docs/OPS.md "Reductions").
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Which dims of x a reduction removes, and where each x element lands in the output.
//
// Example: x [2, 3, 4], axis [-1, 0], keep_dim false -> out [3]; x_to_out = [0, 1, 0].
struct ReducePlan {
  Shape out_shape;
  Shape x_to_out;     // per x dim: its stride in the output, 0 for a reduced dim
  int64_t count = 1;  // number of x elements reduced into each output element
};

// The reference's own output offsets of the dims that the shared plan
// (plan::PlanReduceShape, rules/ops/reduction_plan.h) checked and chose.
ReducePlan OffsetsOf(const Shape& x_shape, const plan::ReduceShape& r) {
  ReducePlan plan;
  plan.out_shape = r.out_shape;
  plan.count = r.count;
  const bool keep_dim = plan.out_shape.size() == x_shape.size();  // reduced dims stay as 1
  std::vector<int64_t> out_dim_of(x_shape.size(), -1);
  int64_t at = 0;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    if (!r.reduced[d]) {
      out_dim_of[d] = at++;
    } else if (keep_dim) {
      ++at;
    }
  }
  Shape out_strides = internal::Strides(plan.out_shape);
  plan.x_to_out.assign(x_shape.size(), 0);
  for (size_t d = 0; d < x_shape.size(); ++d) {
    if (out_dim_of[d] >= 0) plan.x_to_out[d] = out_strides[out_dim_of[d]];
  }
  return plan;
}

// out[o] = fold of combine(acc, x) over the x elements landing on o, starting at `init`.
template <typename F>
Tensor Reduce(const Tensor& x, const ReducePlan& plan, double init, F combine,
              DType dtype = DType::kFloat64) {
  Tensor out = internal::Zeros(plan.out_shape, dtype);
  out.data.assign(out.data.size(), init);
  for (int64_t i = 0; i < NumElements(x.shape); ++i) {
    int64_t o = internal::Dot(internal::Unravel(i, x.shape), plan.x_to_out);
    out.data[o] = combine(out.data[o], x.data[i]);
  }
  return out;
}

// The plan from the common attrs axis / keep_dim (under `keep_name`) / reduce_all.
ReducePlan PlanFromAttrs(const Tensors& inputs, const Attrs& attrs, const std::string& keep_name) {
  return OffsetsOf(inputs[0].shape, plan::PlanReduce(plan::ShapesOf(inputs), attrs, keep_name));
}

double Sum(double a, double b) { return a + b; }

}  // namespace

Tensors sum(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  return {Reduce(inputs[0], plan, 0.0, Sum)};
}

Tensors mean(const Tensors& inputs, const Attrs& attrs) {
  const plan::MeanPlan mean = plan::PlanMean(plan::ShapesOf(inputs), attrs);
  ReducePlan plan = OffsetsOf(inputs[0].shape, mean.reduce);
  const double divisor = static_cast<double>(mean.divisor);
  Tensor out = Reduce(inputs[0], plan, 0.0, Sum);
  for (double& v : out.data) v /= divisor;
  return {out};
}

Tensors max(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  return {Reduce(inputs[0], plan, -kInf, [](double a, double b) { return b > a ? b : a; })};
}

Tensors min(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  return {Reduce(inputs[0], plan, kInf, [](double a, double b) { return b < a ? b : a; })};
}

Tensors prod(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  return {Reduce(inputs[0], plan, 1.0, [](double a, double b) { return a * b; })};
}

Tensors any(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  return {Reduce(
      inputs[0], plan, 0.0, [](double a, double b) { return (a != 0.0 || b != 0.0) ? 1.0 : 0.0; },
      DType::kBool)};
}

Tensors all(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  return {Reduce(
      inputs[0], plan, 1.0, [](double a, double b) { return (a != 0.0 && b != 0.0) ? 1.0 : 0.0; },
      DType::kBool)};
}

Tensors squared_l2_norm(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = OffsetsOf(inputs[0].shape, plan::PlanSquaredL2Norm(plan::ShapesOf(inputs), attrs));
  return {Reduce(inputs[0], plan, 0.0, [](double a, double b) { return a + b * b; })};
}

Tensors mean_all(const Tensors& inputs, const Attrs& attrs) {
  const double divisor = static_cast<double>(plan::PlanMeanAll(plan::ShapesOf(inputs), attrs).divisor);
  const Tensor& x = inputs[0];
  double total = 0.0;
  for (double v : x.data) total += v;
  Tensor out = internal::Zeros({});
  out.data[0] = total / divisor;
  return {out};
}

Tensors logsumexp(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keepdim");
  const Tensor& x = inputs[0];
  // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the max; an empty set gives -inf.
  Tensor m = Reduce(x, plan, -kInf, [](double a, double b) { return b > a ? b : a; });
  Tensor s = internal::Zeros(plan.out_shape);
  for (int64_t i = 0; i < NumElements(x.shape); ++i) {
    int64_t o = internal::Dot(internal::Unravel(i, x.shape), plan.x_to_out);
    if (std::isfinite(m.data[o])) s.data[o] += std::exp(x.data[i] - m.data[o]);
  }
  for (size_t o = 0; o < m.data.size(); ++o) {
    if (std::isfinite(m.data[o])) m.data[o] += std::log(s.data[o]);
  }
  return {m};
}

Tensors p_norm(const Tensors& inputs, const Attrs& attrs) {
  const plan::PNormPlan p = plan::PlanPNorm(plan::ShapesOf(inputs), attrs);
  const double porder = p.porder;
  const Tensor& x = inputs[0];
  ReducePlan plan = OffsetsOf(x.shape, p.reduce);
  Tensor out =
      Reduce(x, plan, 0.0, [=](double a, double b) { return a + std::pow(std::fabs(b), porder); });
  for (double& v : out.data) v = std::pow(v, 1.0 / porder);
  return {out};
}

Tensors frobenius_norm(const Tensors& inputs, const Attrs& attrs) {
  ReducePlan plan = PlanFromAttrs(inputs, attrs, "keep_dim");
  Tensor out = Reduce(inputs[0], plan, 0.0, [](double a, double b) { return a + b * b; });
  for (double& v : out.data) v = std::sqrt(v);
  return {out};
}

Tensors argmax(const Tensors& inputs, const Attrs& attrs) {
  const plan::ArgmaxPlan p = plan::PlanArgmax(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  const Shape& out_shape = p.out_shape;
  internal::AxisView view;
  if (p.flatten) {
    view.len = NumElements(x.shape);
  } else if (p.axis >= 0) {
    view = internal::ViewAlong(x.shape, p.axis);
  }
  Tensor out = internal::Zeros(out_shape, DType::kInt64);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      int64_t best = 0;
      for (int64_t a = 1; a < view.len; ++a) {
        if (x.data[view.At(o, a, i)] > x.data[view.At(o, best, i)]) best = a;
      }
      out.data[o * view.inner + i] = static_cast<double>(best);
    }
  }
  return {out};
}

Tensors cumsum(const Tensors& inputs, const Attrs& attrs) {
  const plan::CumsumPlan c = plan::PlanCumsum(plan::ShapesOf(inputs), attrs);
  const bool exclusive = c.exclusive;
  const bool reverse = c.reverse;
  const Tensor& x = inputs[0];
  Tensor out = x;
  out.dtype = DType::kFloat64;
  out.shape = c.out_shape;
  internal::AxisView view;
  if (c.flatten) {
    view.len = out.shape[0];
  } else if (c.axis >= 0) {
    view = internal::ViewAlong(x.shape, c.axis);
  }
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double running = 0.0;
      for (int64_t step = 0; step < view.len; ++step) {
        int64_t a = reverse ? view.len - 1 - step : step;
        double v = x.data[view.At(o, a, i)];
        if (exclusive) {
          out.data[view.At(o, a, i)] = running;
          running += v;
        } else {
          running += v;
          out.data[view.At(o, a, i)] = running;
        }
      }
    }
  }
  return {out};
}

}  // namespace spmd::reference::ops
