// Reductions, argmax and cumsum (docs/OPS.md "Reductions").
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"

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

// `axis` empty or `reduce_all` reduces every dim. Entries are checked either way (range,
// duplicates). A 0-d x accepts axis 0 / -1 and its output stays 0-d.
ReducePlan PlanReduce(const Shape& x_shape, const std::vector<int64_t>& axis, bool keep_dim,
                      bool reduce_all) {
  int64_t rank = static_cast<int64_t>(x_shape.size());
  std::vector<bool> listed(x_shape.size() + 1, false);  // + 1: a 0-d x's one "axis" 0
  for (int64_t a : axis) {
    int64_t d = internal::NormalizeAxisOrScalar(a, rank, "attrs.axis");
    if (listed[d]) ThrowInvalid("attrs.axis", "axis " + std::to_string(a) + " listed twice");
    listed[d] = true;
  }
  std::vector<bool> reduced(listed.begin(), listed.begin() + rank);
  if (axis.empty() || reduce_all) reduced.assign(x_shape.size(), true);

  ReducePlan plan;
  std::vector<int64_t> out_dim_of(x_shape.size(), -1);
  for (size_t d = 0; d < x_shape.size(); ++d) {
    if (reduced[d]) {
      plan.count *= x_shape[d];
      if (keep_dim) plan.out_shape.push_back(1);
    } else {
      out_dim_of[d] = static_cast<int64_t>(plan.out_shape.size());
      plan.out_shape.push_back(x_shape[d]);
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
ReducePlan PlanFromAttrs(const Tensor& x, const Attrs& attrs, const std::string& keep_name) {
  return PlanReduce(x.shape, attrs.GetInts("axis"), attrs.GetBool(keep_name),
                    attrs.GetBool("reduce_all"));
}

double Sum(double a, double b) { return a + b; }

// The divisor of mean / mean_all: the localized global count on a shard (D7), else the
// number of reduced elements, which must not be 0 while there is an output to fill.
double MeanDivisor(const Attrs& attrs, int64_t local_count, int64_t out_elements,
                   const Shape& x_shape) {
  int64_t count =
      attrs.Has(internal::kLocalCount) ? attrs.GetInt(internal::kLocalCount) : local_count;
  if (count <= 0 && out_elements > 0) {
    ThrowInvalid(InputField(0, "shape"),
                 "mean over an empty set of elements of " + ShapeToString(x_shape));
  }
  return static_cast<double>(count);
}

}  // namespace

Tensors sum(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  return {Reduce(inputs[0], plan, 0.0, Sum)};
}

Tensors mean(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  double divisor = MeanDivisor(attrs, plan.count, NumElements(plan.out_shape), inputs[0].shape);
  Tensor out = Reduce(inputs[0], plan, 0.0, Sum);
  for (double& v : out.data) v /= divisor;
  return {out};
}

Tensors max(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  return {Reduce(inputs[0], plan, -kInf, [](double a, double b) { return b > a ? b : a; })};
}

Tensors min(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  return {Reduce(inputs[0], plan, kInf, [](double a, double b) { return b < a ? b : a; })};
}

Tensors prod(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  return {Reduce(inputs[0], plan, 1.0, [](double a, double b) { return a * b; })};
}

Tensors any(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  return {Reduce(
      inputs[0], plan, 0.0, [](double a, double b) { return (a != 0.0 || b != 0.0) ? 1.0 : 0.0; },
      DType::kBool)};
}

Tensors all(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  ReducePlan plan = PlanFromAttrs(inputs[0], attrs, "keep_dim");
  return {Reduce(
      inputs[0], plan, 1.0, [](double a, double b) { return (a != 0.0 && b != 0.0) ? 1.0 : 0.0; },
      DType::kBool)};
}

Tensors squared_l2_norm(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  // OPS.md declares axis and keep_dim; reduce_all is read only where it is declared.
  bool reduce_all = attrs.Has("reduce_all") && attrs.GetBool("reduce_all");
  ReducePlan plan =
      PlanReduce(inputs[0].shape, attrs.GetInts("axis"), attrs.GetBool("keep_dim"), reduce_all);
  return {Reduce(inputs[0], plan, 0.0, [](double a, double b) { return a + b * b; })};
}

Tensors mean_all(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  double divisor = MeanDivisor(attrs, NumElements(x.shape), 1, x.shape);
  double total = 0.0;
  for (double v : x.data) total += v;
  Tensor out = internal::Zeros({});
  out.data[0] = total / divisor;
  return {out};
}

Tensors logsumexp(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  ReducePlan plan = PlanFromAttrs(x, attrs, "keepdim");
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
  double porder = attrs.GetFloat("porder");
  int64_t axis = attrs.GetInt("axis");
  (void)attrs.GetFloat("epsilon");  // only Paddle's backward uses it
  bool keepdim = attrs.GetBool("keepdim");
  bool asvector = attrs.GetBool("asvector");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  if (!std::isfinite(porder) || porder == 0.0) {
    ThrowInvalid("attrs.porder",
                 "porder must be finite and non-zero, got " + std::to_string(porder));
  }
  ReducePlan plan = asvector ? PlanReduce(x.shape, {}, keepdim, true)
                             : PlanReduce(x.shape, {axis}, keepdim, false);
  Tensor out =
      Reduce(x, plan, 0.0, [=](double a, double b) { return a + std::pow(std::fabs(b), porder); });
  for (double& v : out.data) v = std::pow(v, 1.0 / porder);
  return {out};
}

Tensors argmax(const Tensors& inputs, const Attrs& attrs) {
  int64_t axis = attrs.GetInt("axis");
  bool keepdims = attrs.GetBool("keepdims");
  bool flatten = attrs.GetBool("flatten");
  const std::string& dtype = attrs.GetString("dtype");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  if (dtype != "int64") ThrowInvalid("attrs.dtype", "argmax outputs int64, got '" + dtype + "'");

  Shape out_shape;
  internal::AxisView view;
  if (flatten) {
    view.len = NumElements(x.shape);
    out_shape.assign(keepdims ? x.shape.size() : 1, 1);  // without keepdims Paddle's [1]
  } else {
    int64_t d = internal::NormalizeAxisOrScalar(axis, internal::Rank(x), "attrs.axis");
    view = internal::ViewAlong(x.shape, d);
    for (size_t i = 0; i < x.shape.size(); ++i) {
      if (static_cast<int64_t>(i) != d) {
        out_shape.push_back(x.shape[i]);
      } else if (keepdims) {
        out_shape.push_back(1);
      }
    }
  }
  if (view.len == 0) {
    ThrowInvalid(InputField(0, "shape"), "argmax over an empty dim of " + ShapeToString(x.shape));
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
  int64_t axis = attrs.GetInt("axis");
  bool flatten = attrs.GetBool("flatten");
  bool exclusive = attrs.GetBool("exclusive");
  bool reverse = attrs.GetBool("reverse");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  Tensor out = x;
  out.dtype = DType::kFloat64;
  internal::AxisView view;
  if (flatten) {  // axis is ignored
    out.shape = {NumElements(x.shape)};
    view.len = out.shape[0];
  } else {
    int64_t d = internal::NormalizeAxisOrScalar(axis, internal::Rank(x), "attrs.axis");
    view = internal::ViewAlong(x.shape, d);
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
