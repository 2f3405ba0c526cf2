// What the CPU and CUDA kernels share around the op plans of rules/ops/*_plan.h: the inputs'
// shapes and dtypes in the form the plans take, and the split of x into a split plan's
// pieces (each backend brings its own copy of one range). Header-only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/tensor.h"
#include "rules/ops/shape_plan.h"

namespace spmd::kernels {

inline std::vector<Shape> ShapesOf(const TensorArgs& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  return shapes;
}

inline std::vector<DType> DTypesOf(const TensorArgs& inputs) {
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) dtypes.push_back(t.dtype());
  return dtypes;
}

// x's pieces along plan.axis, each under its piece shape (unbind drops the axis);
// `take(x, axis, start, len)` copies the elements [start, start + len) along axis.
template <typename Take>
Tensors SplitAlong(const Tensor& x, const shape_plan::SplitPlan& plan, Take take) {
  Tensors outs;
  outs.reserve(plan.sizes.size());
  int64_t start = 0;
  for (size_t i = 0; i < plan.sizes.size(); ++i) {
    Tensor piece = take(x, plan.axis, start, plan.sizes[i]);
    piece.Reshape(plan.PieceShape(x.shape(), i));
    outs.push_back(std::move(piece));
    start += plan.sizes[i];
  }
  return outs;
}

}  // namespace spmd::kernels
