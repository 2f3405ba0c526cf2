// Shape ops (docs/OPS.md "Shape ops"). They only move values, so they work on bytes and
// take any dtype; every output keeps x's dtype (the first input's for concat and stack,
// whose inputs must then share it). reshape, flatten, squeeze and unsqueeze copy nothing:
// their output is a copy-on-write view of x's buffer (Tensor::View). The others copy
// contiguous blocks (memcpy) wherever the layout allows; transpose goes through
// internal::PermuteBytes.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/permute.h"
#include "kernels/plan_args.h"
#include "rules/ops/shape_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::NewOutput;

// x with its data reinterpreted under `shape` (same element count, row-major): a view
// sharing x's buffer, copy-on-write (kernels/tensor.h), so no bytes are copied.
Tensor Reshaped(const Tensor& x, const Shape& shape) { return x.View(shape); }

// out's element at index i along dim d is x's at begin[d] + i * step[d] (slice: step 1).
// The dims after t, the last one sliced or stepped, are whole and walk forwards, so each of
// them is one contiguous run of x; when t steps by 1 the run spans t too. An odometer over
// the dims before the run moves x's offset.
Tensor Sliced(const Tensor& x, const shape_plan::SlicePlan& plan) {
  const int64_t rank = x.rank();
  const Shape& begin = plan.begin;
  const Shape& step = plan.step;
  const Shape& shape = plan.sliced;
  Tensor out = NewOutput(plan.out, x.dtype());
  const int64_t numel = out.numel();
  if (numel == 0) return out;
  int64_t t = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (shape[d] != x.shape()[d] || step[d] != 1) t = d;
  }
  const size_t es = x.element_size();
  if (t < 0) {
    std::memcpy(out.bytes(), x.bytes(), static_cast<size_t>(numel) * es);
    return out;
  }
  Shape x_strides(x.shape().size(), 1);
  for (int64_t d = rank - 2; d >= 0; --d) x_strides[d] = x_strides[d + 1] * x.shape()[d + 1];
  const bool merged = step[t] == 1;
  const int64_t walked = merged ? t : t + 1;  // the odometer's dims: [0, walked)
  const int64_t len = merged ? shape[t] * x_strides[t] : x_strides[t];
  const int64_t rows = numel / len;
  std::vector<int64_t> index(static_cast<size_t>(walked), 0);
  int64_t in = 0;
  for (int64_t d = 0; d <= t; ++d) in += begin[d] * x_strides[d];
  for (int64_t row = 0; row < rows; ++row) {
    std::memcpy(out.bytes() + row * len * static_cast<int64_t>(es), x.bytes() + in * static_cast<int64_t>(es),
                static_cast<size_t>(len) * es);
    for (int64_t d = walked - 1; d >= 0; --d) {
      in += step[d] * x_strides[d];
      if (++index[d] < shape[d]) break;
      in -= step[d] * x_strides[d] * shape[d];
      index[d] = 0;
    }
  }
  return out;
}

// The elements [start, start + len) of x along `axis` (x.shape[axis] becomes len).
Tensor TakeRange(const Tensor& x, int64_t axis, int64_t start, int64_t len) {
  const AxisView in = internal::ViewAlong(x.shape(), axis);
  Shape shape = x.shape();
  shape[axis] = len;
  Tensor out = NewOutput(shape, x.dtype());
  const size_t es = x.element_size();
  const size_t block = static_cast<size_t>(len * in.inner) * es;
  if (block == 0) return out;
  for (int64_t o = 0; o < in.outer; ++o) {
    std::memcpy(out.bytes() + o * block, x.bytes() + ((o * in.len + start) * in.inner) * es,
                block);
  }
  return out;
}

// x broadcast to the planned `shape` (right-aligned, each x dim equal or 1).
Tensor BroadcastTo(const Tensor& x, const Shape& shape) {
  Tensor out = NewOutput(shape, x.dtype());
  const internal::BroadcastLoop plan = internal::PlanBroadcast(shape, {x.shape()});
  const int64_t stride = plan.inner_stride(0);
  const size_t es = x.element_size();
  internal::ForEachRow(plan, [&](int64_t o, const int64_t* off, int64_t len) {
    internal::CopyStrided(out.bytes() + o * static_cast<int64_t>(es),
                          x.bytes() + off[0] * static_cast<int64_t>(es), len, stride, es);
  });
  return out;
}

}  // namespace

Tensors reshape(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(Reshaped(inputs[0], shape_plan::PlanReshape(inputs[0].shape(), attrs)));
}

Tensors flatten(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(Reshaped(inputs[0], shape_plan::PlanFlatten(inputs[0].shape(), attrs).out));
}

Tensors squeeze(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(Reshaped(inputs[0], shape_plan::PlanSqueeze(inputs[0].shape(), attrs).out));
}

Tensors unsqueeze(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(Reshaped(inputs[0], shape_plan::PlanUnsqueeze(inputs[0].shape(), attrs).out));
}

Tensors transpose(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TransposePlan plan = shape_plan::PlanTranspose(x.shape(), attrs);
  Tensor out = NewOutput(plan.out, x.dtype());
  internal::PermuteBytes(out.bytes(), x.bytes(), x.shape(), plan.perm, x.element_size());
  return TensorList(std::move(out));
}

Tensors split(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanSplit(inputs[0].shape(), attrs), TakeRange);
}

Tensors split_with_num(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanSplitWithNum(inputs[0].shape(), attrs), TakeRange);
}

Tensors unbind(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanUnbind(inputs[0].shape(), attrs), TakeRange);
}

Tensors concat(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 1);
  const shape_plan::ConcatPlan plan = shape_plan::PlanConcat(ShapesOf(inputs), DTypesOf(inputs), attrs);
  const int64_t axis = plan.axis;
  const Shape& shape = plan.out;
  Tensor out = NewOutput(shape, inputs[0].dtype());
  const AxisView ov = internal::ViewAlong(shape, axis);
  const size_t es = inputs[0].element_size();
  const size_t out_block = static_cast<size_t>(ov.len * ov.inner) * es;
  size_t at = 0;  // byte offset of this input's block within an output block
  for (const Tensor& x : inputs) {
    const size_t block = static_cast<size_t>(x.shape()[axis] * ov.inner) * es;
    if (block > 0) {
      for (int64_t o = 0; o < ov.outer; ++o) {
        std::memcpy(out.bytes() + o * out_block + at, x.bytes() + o * block, block);
      }
    }
    at += block;
  }
  return TensorList(std::move(out));
}

Tensors stack(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 1);
  const shape_plan::ConcatPlan plan = shape_plan::PlanStack(ShapesOf(inputs), DTypesOf(inputs), attrs);
  const Tensor& first = inputs[0];
  const int64_t axis = plan.axis;
  Tensor out = NewOutput(plan.out, first.dtype());
  // Each input is [outer, inner] around the new dim; the output is [outer, count, inner].
  const int64_t outer = NumElements(Shape(first.shape().begin(), first.shape().begin() + axis));
  const int64_t inner = NumElements(Shape(first.shape().begin() + axis, first.shape().end()));
  const size_t block = static_cast<size_t>(inner) * first.element_size();
  if (block == 0) return TensorList(std::move(out));
  const size_t count = inputs.size();
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < count; ++i) {
      std::memcpy(out.bytes() + (o * count + i) * block, inputs[i].bytes() + o * block, block);
    }
  }
  return TensorList(std::move(out));
}

Tensors slice(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(Sliced(inputs[0], shape_plan::PlanSlice(inputs[0].shape(), attrs)));
}

Tensors strided_slice(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(Sliced(inputs[0], shape_plan::PlanStridedSlice(inputs[0].shape(), attrs)));
}

Tensors tile(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TilePlan plan = shape_plan::PlanTile(x.shape(), attrs);
  const Shape& in_shape = plan.in_shape;
  const Shape& repeats = plan.repeats;
  const Shape& shape = plan.out;
  const size_t rank = shape.size();
  Tensor out = NewOutput(shape, x.dtype());
  const int64_t numel = out.numel();
  if (numel == 0) return TensorList(std::move(out));
  const size_t es = x.element_size();
  if (rank == 0) {
    std::memcpy(out.bytes(), x.bytes(), es);
    return TensorList(std::move(out));
  }
  // Each output row (last dim) is x's row at (index mod in_shape), repeated.
  Shape in_strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * in_shape[d + 1];
  const int64_t in_len = in_shape[rank - 1];
  const size_t row_bytes = static_cast<size_t>(in_len) * es;
  const int64_t out_len = shape[rank - 1];
  const int64_t rows = numel / out_len;
  std::vector<int64_t> index(rank - 1, 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t in = 0;
    for (size_t d = 0; d + 1 < rank; ++d) in += (index[d] % in_shape[d]) * in_strides[d];
    std::byte* dst = out.bytes() + row * out_len * static_cast<int64_t>(es);
    for (int64_t r = 0; r < repeats[rank - 1]; ++r) {
      std::memcpy(dst + r * row_bytes, x.bytes() + in * static_cast<int64_t>(es), row_bytes);
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return TensorList(std::move(out));
}

Tensors expand(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  return TensorList(BroadcastTo(inputs[0], shape_plan::PlanExpand(inputs[0].shape(), attrs)));
}

Tensors expand_as(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 2);
  return TensorList(
      BroadcastTo(inputs[0], shape_plan::PlanExpandAs(inputs[0].shape(), inputs[1].shape(), attrs)));
}

namespace {

// Zeroes, per matrix row r of x's last two dims, the columns [begin(r), end(r)) clamped
// to [0, cols): triu's first columns, tril's last (`range` gets the plan's clamped
// diagonal, so row + diagonal cannot overflow).
template <typename Range>
Tensors ZeroRowRanges(const TensorArgs& inputs, const Attrs& attrs, const char* name, bool lower,
                      Range range) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TrianglePlan plan = shape_plan::PlanTriangle(x.shape(), attrs, name, lower);
  const int64_t rows = plan.rows, cols = plan.cols;
  Tensor out = x;
  const int64_t numel = x.numel();
  if (numel == 0) return TensorList(std::move(out));
  const size_t es = x.element_size();
  const int64_t matrices = numel / (rows * cols);
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto [begin, end] = range(r, cols, plan.diagonal);
      const int64_t b = std::clamp<int64_t>(begin, 0, cols), e = std::clamp<int64_t>(end, 0, cols);
      if (e > b) {
        std::memset(out.bytes() + ((m * rows + r) * cols + b) * static_cast<int64_t>(es), 0,
                    static_cast<size_t>(e - b) * es);
      }
    }
  }
  return TensorList(std::move(out));
}

// triu keeps x where col - row >= diagonal: per matrix row, the first
// clamp(row + diagonal, 0, cols) columns become zero.
std::pair<int64_t, int64_t> TriuZeros(int64_t r, int64_t, int64_t d) { return {0, r + d}; }

// tril keeps x where col - row <= diagonal: the columns from row + diagonal + 1 on
// become zero.
std::pair<int64_t, int64_t> TrilZeros(int64_t r, int64_t cols, int64_t d) { return {r + d + 1, cols}; }

}  // namespace

Tensors triu(const TensorArgs& inputs, const Attrs& attrs) {
  return ZeroRowRanges(inputs, attrs, "triu", false, TriuZeros);
}

Tensors tril(const TensorArgs& inputs, const Attrs& attrs) {
  return ZeroRowRanges(inputs, attrs, "tril", true, TrilZeros);
}

Tensors tril_triu(const TensorArgs& inputs, const Attrs& attrs) {
  const bool lower = attrs.GetBool("lower");
  return ZeroRowRanges(inputs, attrs, "tril_triu", lower, lower ? TrilZeros : TriuZeros);
}

}  // namespace spmd::kernels::cpu
