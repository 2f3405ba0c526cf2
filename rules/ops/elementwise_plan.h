// The plans of the elementwise ops with attrs or shape rules beyond broadcasting
// (rules/ops/elementwise.cc): clip, cast, gelu_grad and add_n's attr reads and typed
// validation, written once for the references (reference/ops_elementwise.cc), the CPU
// kernels (kernels/cpu/elementwise.cc) and the CUDA kernels (kernels/cuda/elementwise.cu).
// Header-only; no value arithmetic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rules/model/attrs.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

// clip: min <= max (InvalidArgument attrs.min).
struct ClipPlan {
  double lo = 0.0, hi = 0.0;
};
inline ClipPlan PlanClip(const Attrs& attrs) {
  ClipPlan p{attrs.GetFloat("min"), attrs.GetFloat("max")};
  if (p.lo > p.hi) ThrowInvalid("attrs.min", "min " + std::to_string(p.lo) + " > max " + std::to_string(p.hi));
  return p;
}

// cast: attrs.dtype names a dtype of rules/dtype.h.
inline DType PlanCastDType(const Attrs& attrs) {
  const std::string& name = attrs.GetString("dtype");
  const std::optional<DType> dtype = ParseDType(name);
  if (!dtype) ThrowInvalid("attrs.dtype", "unknown dtype '" + name + "'");
  return *dtype;
}

// cast to int64: the error for element `element` of x, whose value int64 cannot hold (NaN,
// +-inf, |v| >= 2^63; the kernels check the data, the float64 reference keeps them).
[[noreturn]] inline void ThrowCastOutsideInt64(double value, int64_t element) {
  ThrowInvalid(shape::InputField(0, "data"), "value " + std::to_string(value) + " (element " +
                                                 std::to_string(element) + ") does not fit int64");
}

// gelu_grad (x, out_grad): out_grad has x's shape. Returns attrs.approximate.
inline bool PlanGeluGrad(const Shapes& shapes, const Attrs& attrs) {
  const bool approximate = attrs.GetBool("approximate");
  CheckArity(shapes, 2);
  if (shapes[1] != shapes[0]) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "out_grad " + shape::ShapeString(shapes[1]) + " != x " + shape::ShapeString(shapes[0]));
  }
  return approximate;
}

// add_n (at least one input, all of inputs[0]'s shape) -> inputs[0]'s shape.
inline void PlanAddN(const Shapes& shapes) {
  CheckArityAtLeast(shapes, 1);
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] != shapes[0]) {
      ThrowInvalid(shape::InputField(i, "shape"), "add_n needs every input in the shape of inputs[0]");
    }
  }
}

}  // namespace spmd::plan
