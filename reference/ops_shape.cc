// Shape ops (docs/OPS.md "Shape ops"). They only move values, so every output keeps
// the dtype of x (of the first input for concat and stack).
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/shape_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::AxisView;
using internal::CheckArity;

// x with its data reinterpreted under `shape` (same element count, row-major).
Tensor Reshaped(const Tensor& x, const Shape& shape) {
  Tensor out = x;
  out.shape = shape;
  return out;
}

// The elements [start, start + len) of x along `axis` (x.shape[axis] becomes len).
Tensor TakeRange(const Tensor& x, int64_t axis, int64_t start, int64_t len) {
  AxisView in = internal::ViewAlong(x.shape, axis);
  Shape shape = x.shape;
  shape[axis] = len;
  Tensor out = internal::Zeros(shape, x.dtype);
  AxisView ov = internal::ViewAlong(shape, axis);
  for (int64_t o = 0; o < in.outer; ++o) {
    for (int64_t a = 0; a < len; ++a) {
      for (int64_t i = 0; i < in.inner; ++i) {
        out.data[ov.At(o, a, i)] = x.data[in.At(o, start + a, i)];
      }
    }
  }
  return out;
}

// x broadcast to `shape` (planned: right-aligned, each x dim equal or 1).
Tensor BroadcastTo(const Tensor& x, const Shape& shape) {
  Tensor out = internal::Zeros(shape, x.dtype);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    out.data[i] = x.data[internal::BroadcastOffset(internal::Unravel(i, shape), x.shape)];
  }
  return out;
}

}  // namespace

Tensors reshape(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {Reshaped(inputs[0], shape_plan::PlanReshape(inputs[0].shape, attrs))};
}

Tensors flatten(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {Reshaped(inputs[0], shape_plan::PlanFlatten(inputs[0].shape, attrs).out)};
}

Tensors squeeze(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {Reshaped(inputs[0], shape_plan::PlanSqueeze(inputs[0].shape, attrs).out)};
}

Tensors unsqueeze(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {Reshaped(inputs[0], shape_plan::PlanUnsqueeze(inputs[0].shape, attrs).out)};
}

Tensors transpose(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TransposePlan plan = shape_plan::PlanTranspose(x.shape, attrs);
  Shape x_strides = internal::Strides(x.shape);
  Tensor out = internal::Zeros(plan.out, x.dtype);
  for (int64_t i = 0; i < NumElements(plan.out); ++i) {
    std::vector<int64_t> index = internal::Unravel(i, plan.out);
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) {
      offset += index[d] * x_strides[plan.perm[d]];  // out d = x perm[d]
    }
    out.data[i] = x.data[offset];
  }
  return {out};
}

namespace {

Tensors SplitAlong(const Tensor& x, const shape_plan::SplitPlan& plan) {
  Tensors outs;
  int64_t start = 0;
  for (size_t i = 0; i < plan.sizes.size(); ++i) {
    outs.push_back(Reshaped(TakeRange(x, plan.axis, start, plan.sizes[i]), plan.PieceShape(x.shape, i)));
    start += plan.sizes[i];
  }
  return outs;
}

std::vector<DType> DTypesOf(const Tensors& inputs) {
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) dtypes.push_back(t.dtype);
  return dtypes;
}

std::vector<Shape> ShapesOf(const Tensors& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  return shapes;
}

// The pieces (equal but on `axis`) one after another along `axis` of `shape`.
Tensor Join(const Tensors& pieces, int64_t axis, const Shape& shape) {
  Tensor out = internal::Zeros(shape, pieces[0].dtype);
  AxisView ov = internal::ViewAlong(shape, axis);
  int64_t start = 0;
  for (const Tensor& x : pieces) {
    AxisView in = internal::ViewAlong(x.shape, axis);
    for (int64_t o = 0; o < in.outer; ++o) {
      for (int64_t a = 0; a < in.len; ++a) {
        for (int64_t i = 0; i < in.inner; ++i) {
          out.data[ov.At(o, start + a, i)] = x.data[in.At(o, a, i)];
        }
      }
    }
    start += in.len;
  }
  return out;
}

}  // namespace

Tensors split(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanSplit(inputs[0].shape, attrs));
}

Tensors split_with_num(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanSplitWithNum(inputs[0].shape, attrs));
}

Tensors unbind(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanUnbind(inputs[0].shape, attrs));
}

Tensors concat(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 1);
  const shape_plan::ConcatPlan plan = shape_plan::PlanConcat(ShapesOf(inputs), DTypesOf(inputs), attrs);
  return {Join(inputs, plan.axis, plan.out)};
}

// Stacking is concatenating the inputs, each with a new size-1 dim at `axis`.
Tensors stack(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 1);
  const shape_plan::ConcatPlan plan = shape_plan::PlanStack(ShapesOf(inputs), DTypesOf(inputs), attrs);
  Shape with_dim = inputs[0].shape;
  with_dim.insert(with_dim.begin() + plan.axis, 1);
  Tensors pieces;
  for (const Tensor& x : inputs) pieces.push_back(Reshaped(x, with_dim));
  return {Join(pieces, plan.axis, plan.out)};
}

namespace {

// out's element at index i along dim d is x's at begin[d] + i * step[d] (step 1 for slice).
Tensor Sliced(const Tensor& x, const shape_plan::SlicePlan& plan) {
  Tensor out = internal::Zeros(plan.sliced, x.dtype);
  Shape x_strides = internal::Strides(x.shape);
  for (int64_t i = 0; i < NumElements(plan.sliced); ++i) {
    std::vector<int64_t> index = internal::Unravel(i, plan.sliced);
    for (size_t d = 0; d < index.size(); ++d) index[d] = plan.begin[d] + index[d] * plan.step[d];
    out.data[i] = x.data[internal::Dot(index, x_strides)];
  }
  return Reshaped(out, plan.out);
}

}  // namespace

Tensors slice(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {Sliced(inputs[0], shape_plan::PlanSlice(inputs[0].shape, attrs))};
}

Tensors strided_slice(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {Sliced(inputs[0], shape_plan::PlanStridedSlice(inputs[0].shape, attrs))};
}

Tensors tile(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TilePlan plan = shape_plan::PlanTile(x.shape, attrs);
  Shape in_strides = internal::Strides(plan.in_shape);
  Tensor out = internal::Zeros(plan.out, x.dtype);
  for (int64_t i = 0; i < NumElements(plan.out); ++i) {
    std::vector<int64_t> index = internal::Unravel(i, plan.out);
    for (size_t d = 0; d < index.size(); ++d) index[d] %= plan.in_shape[d];  // in_shape[d] > 0 here
    out.data[i] = x.data[internal::Dot(index, in_strides)];
  }
  return {out};
}

Tensors expand(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return {BroadcastTo(inputs[0], shape_plan::PlanExpand(inputs[0].shape, attrs))};
}

Tensors expand_as(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 2);
  return {BroadcastTo(inputs[0], shape_plan::PlanExpandAs(inputs[0].shape, inputs[1].shape, attrs))};
}

namespace {

// Zeroes x where `zero(col - row)` over its last two dims; the plan validates only, the
// diagonal compared is the attr as given.
template <typename Zero>
Tensors Triangle(const Tensors& inputs, const Attrs& attrs, const char* name, bool lower, Zero zero) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TrianglePlan plan = shape_plan::PlanTriangle(x.shape, attrs, name, lower);
  const int64_t diagonal = attrs.GetInt("diagonal");
  Tensor out = x;
  for (int64_t k = 0; k < NumElements(x.shape); ++k) {
    const int64_t col = k % plan.cols, row = (k / plan.cols) % plan.rows;
    if (zero(col - row, diagonal)) out.data[k] = 0.0;
  }
  return {out};
}

// triu keeps x where col - row >= diagonal, tril where col - row <= diagonal.
bool TriuZero(int64_t offset, int64_t diagonal) { return offset < diagonal; }
bool TrilZero(int64_t offset, int64_t diagonal) { return offset > diagonal; }

}  // namespace

Tensors triu(const Tensors& inputs, const Attrs& attrs) {
  return Triangle(inputs, attrs, "triu", false, TriuZero);
}

Tensors tril(const Tensors& inputs, const Attrs& attrs) {
  return Triangle(inputs, attrs, "tril", true, TrilZero);
}

Tensors tril_triu(const Tensors& inputs, const Attrs& attrs) {
  const bool lower = attrs.GetBool("lower");
  return Triangle(inputs, attrs, "tril_triu", lower, lower ? TrilZero : TriuZero);
}

}  // namespace spmd::reference::ops
