// The plans of the reductions (rules/ops/reduction.cc): sum, mean, max, min, prod, any,
// all, squared_l2_norm, mean_all, logsumexp, p_norm, argmax and cumsum's attr reads, typed
// validation and output shapes, written once for the references (reference/ops_reduction.cc),
// the CPU kernels (kernels/cpu/reduction.cc) and the CUDA kernels (kernels/cuda/reduction.cu,
// reduce_plan.cc), which keep only their layouts and loops. Header-only; no value arithmetic.
//
// Example: x [2, 3, 4], axis {-1, 0}, keep_dim -> out [1, 3, 1], count 8.
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

// Which dims a reduction removes: attrs.axis in range (a 0-d x takes 0 and -1), no dim
// twice; an empty list or reduce_all reduces every dim.
struct ReduceShape {
  Shape out_shape;
  std::vector<bool> reduced;  // per x dim
  int64_t count = 1;          // x elements per output element
};

inline ReduceShape PlanReduceShape(const Shape& x, const std::vector<int64_t>& axis, bool keep_dim,
                                   bool reduce_all) {
  const auto rank = static_cast<int64_t>(x.size());
  std::vector<bool> listed(x.size() + 1, false);
  for (int64_t a : axis) {
    const int normalized = shape::NormalizeAxisOrScalar(a, rank, "attrs.axis");
    const size_t d = normalized < 0 ? 0 : static_cast<size_t>(normalized);
    if (listed[d]) ThrowInvalid("attrs.axis", "axis " + std::to_string(a) + " listed twice");
    listed[d] = true;
  }
  ReduceShape plan;
  plan.reduced.assign(listed.begin(), listed.begin() + rank);
  if (axis.empty() || reduce_all) plan.reduced.assign(x.size(), true);
  for (size_t d = 0; d < x.size(); ++d) {
    if (plan.reduced[d]) {
      plan.count *= x[d];
      if (keep_dim) plan.out_shape.push_back(1);
    } else {
      plan.out_shape.push_back(x[d]);
    }
  }
  return plan;
}

// sum, max, min, prod, any, all (keep_name "keep_dim"), logsumexp ("keepdim"): x; axis,
// the keep flag, reduce_all.
inline ReduceShape PlanReduce(const Shapes& shapes, const Attrs& attrs, const std::string& keep_name) {
  CheckArity(shapes, 1);
  return PlanReduceShape(shapes[0], attrs.GetInts("axis"), attrs.GetBool(keep_name), attrs.GetBool("reduce_all"));
}

// squared_l2_norm: axis and keep_dim; reduce_all is read only where it is declared.
inline ReduceShape PlanSquaredL2Norm(const Shapes& shapes, const Attrs& attrs) {
  CheckArity(shapes, 1);
  const bool reduce_all = attrs.Has("reduce_all") && attrs.GetBool("reduce_all");
  return PlanReduceShape(shapes[0], attrs.GetInts("axis"), attrs.GetBool("keep_dim"), reduce_all);
}

// mean and mean_all: the divisor is the localized global count on a shard (local.count), else
// the number of reduced elements, which must not be 0 while there is an output to fill.
struct MeanPlan {
  ReduceShape reduce;
  int64_t divisor = 1;
};

namespace internal {
inline int64_t MeanDivisor(const Attrs& attrs, int64_t local_count, int64_t out_elements, const Shape& x) {
  const int64_t count = attrs.local().count.value_or(local_count);
  if (count <= 0 && out_elements > 0) {
    ThrowInvalid(shape::InputField(0, "shape"), "mean over an empty set of elements of " + shape::ShapeString(x));
  }
  return count;
}
inline int64_t Elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace internal

inline MeanPlan PlanMean(const Shapes& shapes, const Attrs& attrs) {
  MeanPlan p;
  p.reduce = PlanReduce(shapes, attrs, "keep_dim");
  p.divisor = internal::MeanDivisor(attrs, p.reduce.count, internal::Elements(p.reduce.out_shape), shapes[0]);
  return p;
}

inline MeanPlan PlanMeanAll(const Shapes& shapes, const Attrs& attrs) {
  CheckArity(shapes, 1);
  MeanPlan p;
  p.divisor = internal::MeanDivisor(attrs, internal::Elements(shapes[0]), 1, shapes[0]);
  p.reduce = PlanReduceShape(shapes[0], {}, false, true);
  return p;
}

// p_norm: porder finite and non-zero; asvector reduces every dim, else dim `axis`.
struct PNormPlan {
  ReduceShape reduce;
  double porder = 2.0;
};
inline PNormPlan PlanPNorm(const Shapes& shapes, const Attrs& attrs) {
  PNormPlan p;
  p.porder = attrs.GetFloat("porder");
  const int64_t axis = attrs.GetInt("axis");
  (void)attrs.GetFloat("epsilon");  // only Paddle's backward uses it
  const bool keepdim = attrs.GetBool("keepdim");
  const bool asvector = attrs.GetBool("asvector");
  CheckArity(shapes, 1);
  if (!std::isfinite(p.porder) || p.porder == 0.0) {
    ThrowInvalid("attrs.porder", "porder must be finite and non-zero, got " + std::to_string(p.porder));
  }
  p.reduce = asvector ? PlanReduceShape(shapes[0], {}, keepdim, true)
                      : PlanReduceShape(shapes[0], {axis}, keepdim, false);
  return p;
}

// argmax: int64 indices along attrs.axis (or of the flattened x), over a non-empty dim.
struct ArgmaxPlan {
  bool flatten = false;
  int axis = -1;  // the dim searched; -1 with flatten or for a 0-d x
  Shape out_shape;
};
inline ArgmaxPlan PlanArgmax(const Shapes& shapes, const Attrs& attrs) {
  ArgmaxPlan p;
  const int64_t axis = attrs.GetInt("axis");
  const bool keepdims = attrs.GetBool("keepdims");
  p.flatten = attrs.GetBool("flatten");
  const std::string& dtype = attrs.GetString("dtype");
  CheckArity(shapes, 1);
  const Shape& x = shapes[0];
  if (dtype != "int64") ThrowInvalid("attrs.dtype", "argmax outputs int64, got '" + dtype + "'");
  int64_t len = 1;
  if (p.flatten) {
    len = internal::Elements(x);
    // keepdims: x's rank of 1s; else Paddle's rank-1 [1] (one index into the flattened x).
    p.out_shape = keepdims ? Shape(x.size(), 1) : Shape{1};
  } else {
    p.axis = shape::NormalizeAxisOrScalar(axis, static_cast<int64_t>(x.size()), "attrs.axis");
    for (int d = 0; d < static_cast<int>(x.size()); ++d) {
      if (d != p.axis) {
        p.out_shape.push_back(x[d]);
      } else {
        len = x[d];
        if (keepdims) p.out_shape.push_back(1);
      }
    }
  }
  if (len == 0) ThrowInvalid(shape::InputField(0, "shape"), "argmax over an empty dim of " + shape::ShapeString(x));
  return p;
}

// cumsum: along attrs.axis (a 0-d x takes 0 and -1), or along the flattened x (axis
// ignored; out [numel]).
struct CumsumPlan {
  bool flatten = false, exclusive = false, reverse = false;
  int axis = -1;  // the dim summed along; -1 with flatten or for a 0-d x
  Shape out_shape;
};
inline CumsumPlan PlanCumsum(const Shapes& shapes, const Attrs& attrs) {
  CumsumPlan p;
  const int64_t axis = attrs.GetInt("axis");
  p.flatten = attrs.GetBool("flatten");
  p.exclusive = attrs.GetBool("exclusive");
  p.reverse = attrs.GetBool("reverse");
  CheckArity(shapes, 1);
  const Shape& x = shapes[0];
  p.out_shape = x;
  if (p.flatten) {
    p.out_shape = {internal::Elements(x)};
  } else {
    p.axis = shape::NormalizeAxisOrScalar(axis, static_cast<int64_t>(x.size()), "attrs.axis");
  }
  return p;
}

// cummax / cummin: the running extreme along attrs.axis (a 0-d x takes 0 and -1) and its
// index; both outputs have x's shape (an empty axis gives empty outputs). The indices are
// int64 (attrs.dtype, Paddle's choice of index type: only "int64" here, as argmax).
struct CumExtremePlan {
  int axis = -1;  // the dim scanned; -1 for a 0-d x
  Shape out_shape;
};
inline CumExtremePlan PlanCumExtreme(const Shapes& shapes, const Attrs& attrs, const char* name) {
  CumExtremePlan p;
  const int64_t axis = attrs.GetInt("axis");
  const std::string& dtype = attrs.GetString("dtype");
  CheckArity(shapes, 1);
  const Shape& x = shapes[0];
  if (dtype != "int64") ThrowInvalid("attrs.dtype", std::string(name) + " outputs int64 indices, got '" + dtype + "'");
  p.axis = shape::NormalizeAxisOrScalar(axis, static_cast<int64_t>(x.size()), "attrs.axis");
  p.out_shape = x;
  return p;
}

// cummax / cummin on a piece (their exchange phases): the op's checks on x, `arity` inputs (x,
// then the gathered summaries in the finish phase), and the piece's first position along the
// axis (localized local.offset; 0 unsharded).
struct CumExtremePiece {
  CumExtremePlan op;
  int64_t first = 0;
};
inline CumExtremePiece PlanCumExtremePiece(const Shapes& shapes, const Attrs& attrs, const char* name, size_t arity) {
  CheckArity(shapes, arity);
  CumExtremePiece p{PlanCumExtreme(Shapes(shapes.begin(), shapes.begin() + 1), attrs, name), 0};
  if (attrs.local().offset.has_value() && p.op.axis >= 0) {
    const std::vector<int64_t>& offset = *attrs.local().offset;
    if (offset.size() != shapes[0].size()) ThrowInvalid(LocalFieldName(LocalField::kOffset), "must have x's rank");
    p.first = offset[p.op.axis];
  }
  return p;
}

}  // namespace spmd::plan
