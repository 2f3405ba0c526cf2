// CUDA kernels of the shape family (the ops of kernels/cpu/shape.cc): the plans of
// rules/ops/shape_plan.h (the rule's, the reference's and the CPU kernel's validation and
// shapes), then device copies: reshape / flatten / squeeze / unsqueeze one cudaMemcpyAsync under the new
// shape; split / unbind / concat / stack / slice / strided_slice / tile / expand / expand_as copy plans
// (kernels/cuda/index_map.h: a single contiguous run becomes a cudaMemcpyAsync, the rest a
// strided kernel over units as wide as the layout allows); transpose PermuteOnDevice;
// triu / tril / tril_triu one pass that keeps or zeroes each element. Any dtype: they
// move bytes (HalfInputs::kNative), and every output keeps x's dtype.
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/registry.h"
#include "kernels/plan_args.h"
#include "rules/ops/shape_plan.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::CheckArity;

Tensor TakeRange(const Tensor& x, int64_t axis, int64_t start, int64_t len) {
  Shape shape = x.shape();
  shape[axis] = len;
  Tensor out = detail::NewOut(x, shape, x.dtype());
  detail::RunCopyPlan(PlanTakeRange(x.shape(), axis, start, len, static_cast<int64_t>(x.element_size())),
                      out.bytes(), x.bytes(), detail::StreamOf(x));
  return out;
}

// x broadcast to the planned `shape` (right-aligned, each x dim equal or 1).
Tensor BroadcastTo(const Tensor& x, const Shape& shape) {
  Tensor out = detail::NewOut(x, shape, x.dtype());
  detail::RunCopyPlan(PlanExpand(x.shape(), shape, static_cast<int64_t>(x.element_size())), out.bytes(),
                      x.bytes(), detail::StreamOf(x));
  return out;
}

Tensors Reshape(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return TensorList(detail::CopyAs(inputs[0], shape_plan::PlanReshape(inputs[0].shape(), attrs)));
}

Tensors Flatten(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return TensorList(detail::CopyAs(inputs[0], shape_plan::PlanFlatten(inputs[0].shape(), attrs).out));
}

Tensors Squeeze(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return TensorList(detail::CopyAs(inputs[0], shape_plan::PlanSqueeze(inputs[0].shape(), attrs).out));
}

Tensors Unsqueeze(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return TensorList(detail::CopyAs(inputs[0], shape_plan::PlanUnsqueeze(inputs[0].shape(), attrs).out));
}

Tensors Transpose(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const shape_plan::TransposePlan plan = shape_plan::PlanTranspose(inputs[0].shape(), attrs);
  detail::ci::CheckOutputShape(plan.out);
  return TensorList(PermuteOnDevice(inputs[0], plan.perm));
}

Tensors Split(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanSplit(inputs[0].shape(), attrs), TakeRange);
}

Tensors SplitWithNum(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanSplitWithNum(inputs[0].shape(), attrs), TakeRange);
}

Tensors Unbind(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return SplitAlong(inputs[0], shape_plan::PlanUnbind(inputs[0].shape(), attrs), TakeRange);
}

Tensors Concat(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  detail::ci::CheckArityAtLeast(inputs, 1);
  const shape_plan::ConcatPlan plan = shape_plan::PlanConcat(ShapesOf(inputs), DTypesOf(inputs), attrs);
  const Tensor& first = inputs[0];
  Tensor out = detail::NewOut(first, plan.out, first.dtype());
  const int64_t es = static_cast<int64_t>(first.element_size());
  int64_t at = 0;
  for (const Tensor& x : inputs) {
    detail::RunCopyPlan(PlanConcatPiece(plan.out, plan.axis, at, x.shape(), es), out.bytes(), x.bytes(),
                        detail::StreamOf(first));
    at += x.shape()[plan.axis];
  }
  return TensorList(std::move(out));
}

Tensors Stack(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  detail::ci::CheckArityAtLeast(inputs, 1);
  const shape_plan::ConcatPlan plan = shape_plan::PlanStack(ShapesOf(inputs), DTypesOf(inputs), attrs);
  const Tensor& first = inputs[0];
  Tensor out = detail::NewOut(first, plan.out, first.dtype());
  const int64_t es = static_cast<int64_t>(first.element_size());
  const int64_t count = static_cast<int64_t>(inputs.size());
  for (int64_t i = 0; i < count; ++i) {
    detail::RunCopyPlan(PlanStackPiece(first.shape(), plan.axis, i, count, es), out.bytes(),
                        inputs[static_cast<size_t>(i)].bytes(), detail::StreamOf(first));
  }
  return TensorList(std::move(out));
}

Tensors Sliced(const TensorArgs& inputs, const shape_plan::SlicePlan& plan) {
  const Tensor& x = inputs[0];
  Tensor out = detail::NewOut(x, plan.out, x.dtype());
  detail::RunCopyPlan(PlanSlice(x.shape(), plan.begin, plan.sliced, static_cast<int64_t>(x.element_size()), plan.step),
                      out.bytes(), x.bytes(), detail::StreamOf(x));
  return TensorList(std::move(out));
}

Tensors Slice(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return Sliced(inputs, shape_plan::PlanSlice(inputs[0].shape(), attrs));
}

Tensors StridedSlice(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return Sliced(inputs, shape_plan::PlanStridedSlice(inputs[0].shape(), attrs));
}

Tensors Tile(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TilePlan plan = shape_plan::PlanTile(x.shape(), attrs);
  Tensor out = detail::NewOut(x, plan.out, x.dtype());
  detail::RunCopyPlan(PlanTile(plan.in_shape, plan.repeats, static_cast<int64_t>(x.element_size())), out.bytes(),
                      x.bytes(), detail::StreamOf(x));
  return TensorList(std::move(out));
}

Tensors Expand(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return TensorList(BroadcastTo(inputs[0], shape_plan::PlanExpand(inputs[0].shape(), attrs)));
}

Tensors ExpandAs(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 2);
  return TensorList(
      BroadcastTo(inputs[0], shape_plan::PlanExpandAs(inputs[0].shape(), inputs[1].shape(), attrs)));
}

// ---- triu / tril / tril_triu ----------------------------------------------------------------

template <typename U>
__global__ void TriKernel(const U* x, U* out, int64_t n, int64_t rows, int64_t cols, int64_t diagonal,
                          bool lower) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const int64_t row_index = i / cols;
    const int64_t c = i - row_index * cols;
    const int64_t r = row_index % rows;
    out[i] = TriZero(r, c, diagonal, lower) ? U(0) : x[i];
  }
}

Tensors Tri(const TensorArgs& inputs, const Attrs& attrs, const char* name, bool lower) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const shape_plan::TrianglePlan plan = shape_plan::PlanTriangle(x.shape(), attrs, name, lower);
  Tensor out = NewOutput(x, x.shape(), x.dtype());
  const int64_t n = x.numel();
  if (n == 0) return TensorList(std::move(out));
  const LaunchConfig cfg = GridStride(n);
  detail::DispatchUnit(static_cast<int64_t>(x.element_size()), [&](auto u) {
    using U = decltype(u);
    if constexpr (sizeof(U) <= 8) {
      TriKernel<U><<<cfg.grid, cfg.block, 0, detail::StreamOf(x)>>>(reinterpret_cast<const U*>(x.bytes()),
                                                                    reinterpret_cast<U*>(out.bytes()), n,
                                                                    plan.rows, plan.cols, plan.diagonal, lower);
      SPMD_CUDA_CHECK_LAUNCH();
    }
  });
  return TensorList(std::move(out));
}

Tensors Triu(const TensorArgs& inputs, const Attrs& attrs) { return Tri(inputs, attrs, "triu", false); }
Tensors Tril(const TensorArgs& inputs, const Attrs& attrs) { return Tri(inputs, attrs, "tril", true); }
Tensors TrilTriu(const TensorArgs& inputs, const Attrs& attrs) {
  const bool lower = attrs.GetBool("lower");
  return Tri(inputs, attrs, "tril_triu", lower);
}

}  // namespace

// The shape ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::reshape{&Reshape, HalfInputs::kNative};
const CudaKernel ops::flatten{&Flatten, HalfInputs::kNative};
const CudaKernel ops::squeeze{&Squeeze, HalfInputs::kNative};
const CudaKernel ops::unsqueeze{&Unsqueeze, HalfInputs::kNative};
const CudaKernel ops::transpose{&Transpose, HalfInputs::kNative};
const CudaKernel ops::split{&Split, HalfInputs::kNative};
const CudaKernel ops::split_with_num{&SplitWithNum, HalfInputs::kNative};
const CudaKernel ops::unbind{&Unbind, HalfInputs::kNative};
const CudaKernel ops::concat{&Concat, HalfInputs::kNative};
const CudaKernel ops::stack{&Stack, HalfInputs::kNative};
const CudaKernel ops::slice{&Slice, HalfInputs::kNative};
const CudaKernel ops::strided_slice{&StridedSlice, HalfInputs::kNative};
const CudaKernel ops::tile{&Tile, HalfInputs::kNative};
const CudaKernel ops::expand{&Expand, HalfInputs::kNative};
const CudaKernel ops::expand_as{&ExpandAs, HalfInputs::kNative};
const CudaKernel ops::triu{&Triu, HalfInputs::kNative};
const CudaKernel ops::tril{&Tril, HalfInputs::kNative};
const CudaKernel ops::tril_triu{&TrilTriu, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
