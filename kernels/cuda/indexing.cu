// CUDA kernels of the indexing family (the ops of kernels/cpu/indexing.cc): one_hot, roll,
// pad, swiglu, index_select, gather. roll and pad are copy plans (index_map.h); pad fills
// first with pad_value in x's dtype. index_select / gather read their ids on the device,
// one thread per output unit. An id the CPU kernel refuses (not a whole number, beyond
// 9e15, negative, or >= the dim unsharded) gives a zero block and sets the op's bit in the
// device's index-fault word (index_fault.h); one_hot gives a zero row for it.
// Byte movers take every dtype (HalfInputs::kNative); one_hot and swiglu compute in
// float32 / float64, 2-byte floats through RunCudaKernel's widening, as on the CPU.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/indexing_plan.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::AxisView;
using detail::ci::CheckArity;

int64_t Mod(int64_t v, int64_t n) {
  const int64_t r = v % n;
  return r < 0 ? r + n : r;
}

// ---- one_hot -----------------------------------------------------------------------------------

__global__ void OneHotKernel(const void* index, DType dtype, int64_t classes, int64_t n, float* out,
                             uint32_t* faults) {
  for (SPMD_GRID_STRIDE(i, n)) {
    bool bad = false;
    out[i] = OneHotValue(index, dtype, classes, i, &bad) ? 1.0f : 0.0f;
    if (bad && i % classes == 0) detail::RecordFault(faults, IndexFaultOp::kOneHot);
  }
}

Tensors OneHot(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 1);
  const Tensor& ids = inputs[0];
  const indexing_plan::OneHotPlan plan = indexing_plan::PlanOneHot(ids.shape(), attrs);
  const int64_t classes = plan.classes;
  Tensor out = detail::NewOut(ids, plan.out, DType::kFloat32);
  const int64_t n = out.numel();
  if (n == 0) return TensorList(std::move(out));
  const LaunchConfig cfg = GridStride(n);
  OneHotKernel<<<cfg.grid, cfg.block, 0, detail::StreamOf(ids)>>>(
      ids.bytes(), ids.dtype(), classes, n, reinterpret_cast<float*>(out.bytes()), IndexFaultWord());
  SPMD_CUDA_CHECK_LAUNCH();
  return TensorList(std::move(out));
}

// ---- roll, pad -----------------------------------------------------------------------------------

Tensors Roll(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const indexing_plan::RollPlan plan = indexing_plan::PlanRoll(x.shape(), attrs);
  const std::vector<int64_t>& shifts = attrs.GetInts("shifts");
  const int64_t es = static_cast<int64_t>(x.element_size());
  if (plan.flat) {
    Tensor out = detail::NewOut(x, x.shape(), x.dtype());
    if (x.numel() == 0) return TensorList(std::move(out));
    detail::RunCopyPlan(PlanRoll({x.numel()}, {Mod(shifts[0], x.numel())}, es), out.bytes(), x.bytes(),
                        detail::StreamOf(x));
    return TensorList(std::move(out));
  }
  std::vector<int64_t> total(static_cast<size_t>(x.rank()), 0);
  for (size_t k = 0; k < plan.axes.size(); ++k) {
    const int64_t d = plan.axes[k];
    const int64_t n = x.shape()[d];
    if (n > 0) total[d] = Mod(total[d] + Mod(shifts[k], n), n);
  }
  Tensor out = detail::NewOut(x, x.shape(), x.dtype());
  detail::RunCopyPlan(PlanRoll(x.shape(), total, es), out.bytes(), x.bytes(), detail::StreamOf(x));
  return TensorList(std::move(out));
}

Tensors Pad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const std::vector<int64_t>& paddings = attrs.GetInts("paddings");
  const double value = attrs.GetFloat("pad_value");
  const DType dtype = x.dtype();
  Tensor out = detail::NewOut(x, indexing_plan::PlanPad(x.shape(), attrs, &dtype), x.dtype());
  const int64_t es = static_cast<int64_t>(x.element_size());
  const cudaStream_t stream = detail::StreamOf(x);
  detail::FillElements(out.bytes(), out.numel(), es, PadFillBits(x.dtype(), value), stream);
  detail::RunCopyPlan(PlanPad(x.shape(), paddings, es), out.bytes(), x.bytes(), stream);
  return TensorList(std::move(out));
}

// ---- swiglu --------------------------------------------------------------------------------------

template <typename T>
__global__ void SwigluKernel(const void* x, DType xd, const void* y, DType yd, T* out, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const T v = LoadAs<T>(x, xd, i);
    out[i] = v * LoadAs<T>(y, yd, i) / (T(1) + exp(-v));
  }
}

Tensors Swiglu(const TensorArgs& inputs, const Attrs&) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 2);
  shape_plan::CheckSameShape(inputs[0].shape(), inputs[1].shape());
  const DType dtype = detail::ci::ComputeDType(inputs, {0, 1});
  Tensor out = detail::NewOut(inputs[0], inputs[0].shape(), dtype);
  const int64_t n = out.numel();
  if (n == 0) return TensorList(std::move(out));
  const LaunchConfig cfg = GridStride(n);
  const auto launch = [&](auto zero) {
    using T = decltype(zero);
    SwigluKernel<T><<<cfg.grid, cfg.block, 0, detail::StreamOf(inputs[0])>>>(
        inputs[0].bytes(), inputs[0].dtype(), inputs[1].bytes(), inputs[1].dtype(),
        reinterpret_cast<T*>(out.bytes()), n);
    SPMD_CUDA_CHECK_LAUNCH();
  };
  if (dtype == DType::kFloat32) launch(float{}); else launch(double{});
  return TensorList(std::move(out));
}

// ---- index_select / gather ----------------------------------------------------------------------

template <typename U>
__global__ void SelectKernel(SelectArgs a, const U* x, U* out, int64_t n, uint32_t* faults, IndexFaultOp op) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const int64_t s = SelectSource(a, i);
    if (s >= 0) {
      out[i] = x[s];
    } else {
      out[i] = U{};
      if (s == kReadBad && i % a.inner == 0) detail::RecordFault(faults, op);
    }
  }
}

// Only the ids, for an empty output (no element reads them, but the CPU kernel refuses a
// bad one all the same).
__global__ void SelectCheckKernel(SelectArgs a, uint32_t* faults, IndexFaultOp op) {
  for (SPMD_GRID_STRIDE(k, a.ids)) {
    if (SelectSource(a, k) == kReadBad) detail::RecordFault(faults, op);
  }
}

Tensors Select(const TensorArgs& inputs, const Attrs& attrs, bool allow_0d, IndexFaultOp op) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::SelectPlan plan = indexing_plan::PlanSelect(x.shape(), index.shape(), attrs, allow_0d);
  const AxisView v = detail::ci::ViewAlong(x.shape(), plan.axis);
  const int64_t k_count = index.numel();
  Tensor out = detail::NewOut(x, plan.out, x.dtype());
  const int64_t es = static_cast<int64_t>(x.element_size());
  SelectArgs a;
  a.outer = v.outer;
  a.len = v.len;
  a.ids = k_count;
  a.start = plan.start;
  a.sharded = plan.sharded;
  a.index = index.bytes();
  a.index_dtype = index.dtype();
  if (out.numel() == 0) {
    if (k_count > 0) {  // the CPU kernel checks the ids before it copies anything
      a.outer = a.inner = 1;
      const LaunchConfig cfg = GridStride(k_count);
      SelectCheckKernel<<<cfg.grid, cfg.block, 0, detail::StreamOf(x)>>>(a, IndexFaultWord(), op);
      SPMD_CUDA_CHECK_LAUNCH();
    }
    return TensorList(std::move(out));
  }
  const int64_t unit = RowUnit(v.inner * es, std::min(detail::Alignment(x.bytes()), detail::Alignment(out.bytes())));
  a.inner = v.inner * es / unit;
  const int64_t n = a.outer * a.ids * a.inner;
  const LaunchConfig cfg = GridStride(n);
  detail::DispatchUnit(unit, [&](auto u) {
    using U = decltype(u);
    SelectKernel<U><<<cfg.grid, cfg.block, 0, detail::StreamOf(x)>>>(
        a, reinterpret_cast<const U*>(x.bytes()), reinterpret_cast<U*>(out.bytes()), n, IndexFaultWord(), op);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}

Tensors IndexSelect(const TensorArgs& inputs, const Attrs& attrs) {
  return Select(inputs, attrs, false, IndexFaultOp::kIndexSelect);
}
Tensors Gather(const TensorArgs& inputs, const Attrs& attrs) {
  return Select(inputs, attrs, true, IndexFaultOp::kGather);
}

}  // namespace

// The indexing ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::one_hot{&OneHot, HalfInputs::kWidened};
const CudaKernel ops::roll{&Roll, HalfInputs::kNative};
const CudaKernel ops::pad{&Pad, HalfInputs::kNative};
const CudaKernel ops::swiglu{&Swiglu, HalfInputs::kWidened};
const CudaKernel ops::index_select{&IndexSelect, HalfInputs::kNative};
const CudaKernel ops::gather{&Gather, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
