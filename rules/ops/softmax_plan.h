// The plan of softmax_grad (rules/ops/softmax.cc): its shape check, written once for the
// reference (reference/ops_softmax.cc), the CPU kernel (kernels/cpu/softmax.cc) and the CUDA
// kernel (kernels/cuda/softmax.cu). softmax and log_softmax need only attrs.axis
// (shape::NormalizeAxisOrScalar). Header-only; no value arithmetic.
#pragma once

#include <string>

#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

// softmax_grad (out, out_grad): out_grad must have out's shape.
inline void PlanSoftmaxGrad(const Shapes& shapes) {
  CheckArity(shapes, 2);
  if (shapes[1] != shapes[0]) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "out_grad " + shape::ShapeString(shapes[1]) + " != out " + shape::ShapeString(shapes[0]));
  }
}

}  // namespace spmd::plan
