// CUDA kernels of the softmax family (the ops of kernels/cpu/softmax.cc): softmax,
// log_softmax, softmax_grad. Rows (inner == 1) are fused row kernels (launch shapes:
// rows::PlanRows, kernels/cuda/rows.cuh): the row's max and sum of exponentials in one
// pass (an online max / rescaled sum merged across threads), the outputs in a second. Along an inner
// axis a thread owns one column and walks it in order: bitwise reproducible run to run.
// bfloat16 / float16 are read and written as they are, computed in float32.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_util.cuh"
#include "kernels/cuda/registry.h"
#include "kernels/cuda/rows.cuh"
#include "rules/ops/softmax_plan.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::AxisView;
using cpu::internal::CheckArity;
using cpu::internal::ComputeDType;
using cpu::internal::InputField;
using rows::kBlock;
using rows::LoadMaxSum;
using rows::MaxSum;
using rows::MergeMaxSum;
using rows::NoMaxSum;
using rows::PlanRows;
using rows::RowLaunch;

// ---- softmax, log_softmax ---------------------------------------------------------------------

template <typename V, bool kLog, bool kWarp>
__global__ void SoftmaxRows(const V* x, V* out, int64_t rows, int64_t len) {
  using T = Compute<V>;
  const RowGroup<kWarp> g = MakeRowGroup<kWarp>();
  for (int64_t r = g.first_row; r < rows; r += g.row_step) {
    const V* xr = x + r * len;
    V* orow = out + r * len;
    MaxSum<T> acc = NoMaxSum<T>();
    for (int64_t a = g.lane; a < len; a += g.size) {
      acc = MergeMaxSum<T>{}(acc, LoadMaxSum(static_cast<T>(xr[a])));
    }
    acc = GroupAllReduce<kWarp>(acc, MergeMaxSum<T>{}, NoMaxSum<T>());
    const T log_s = kLog ? Log(acc.s) : T(0);
    for (int64_t a = g.lane; a < len; a += g.size) {
      const T v = static_cast<T>(xr[a]);
      orow[a] = V(kLog ? (v - acc.m) - log_s : Exp(v - acc.m) / acc.s);
    }
  }
}

template <typename V, bool kLog>
__global__ void SoftmaxColumns(const V* x, V* out, int64_t outer, int64_t len, int64_t inner) {
  using T = Compute<V>;
  const int64_t total = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    const int64_t o = t / inner;
    const int64_t base = o * len * inner + (t - o * inner);
    MaxSum<T> acc = NoMaxSum<T>();
    for (int64_t a = 0; a < len; ++a) {
      acc = MergeMaxSum<T>{}(acc, LoadMaxSum(static_cast<T>(x[base + a * inner])));
    }
    const T log_s = kLog ? Log(acc.s) : T(0);
    for (int64_t a = 0; a < len; ++a) {
      const T v = static_cast<T>(x[base + a * inner]);
      out[base + a * inner] = V(kLog ? (v - acc.m) - log_s : Exp(v - acc.m) / acc.s);
    }
  }
}

template <typename V, bool kLog>
void LaunchSoftmax(const V* x, V* out, const AxisView& v, cudaStream_t stream) {
  if (v.outer * v.len * v.inner == 0) return;
  if (v.inner == 1) {
    const RowLaunch l = PlanRows(v.outer, v.len);
    if (l.warp) {
      SoftmaxRows<V, kLog, true><<<l.grid, l.block, 0, stream>>>(x, out, v.outer, v.len);
    } else {
      SoftmaxRows<V, kLog, false><<<l.grid, l.block, 0, stream>>>(x, out, v.outer, v.len);
    }
  } else {
    SoftmaxColumns<V, kLog><<<GridFor(v.outer * v.inner, kBlock), kBlock, 0, stream>>>(
        x, out, v.outer, v.len, v.inner);
  }
  SPMD_CUDA_CHECK_LAUNCH();
}

// The dim attrs.axis names (a 0-d x: the whole of it).
AxisView ViewFromAxisAttr(const Tensor& x, const Attrs& attrs) {
  const int64_t axis =
      cpu::internal::NormalizeAxisOrScalar(attrs.GetInt("axis"), x.rank(), "attrs.axis");
  return cpu::internal::ViewAlong(x.shape(), axis);
}

// softmax / log_softmax: x (value input 0) along attrs.axis.
template <bool kLog>
Tensors SoftmaxOp(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  CheckArity(inputs, 1);
  const AxisView view = ViewFromAxisAttr(inputs[0], attrs);
  const DType dtype = ComputeDType(inputs, {0});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = temps.As(inputs[0], dtype);
  Tensor out = NewChecked(inputs[0], inputs[0].shape(), dtype);
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    LaunchSoftmax<V, kLog>(DataOf<V>(x), DataOf<V>(out), view, ctx.stream);
  });
  return TensorList(std::move(out));
}

// ---- softmax_grad -----------------------------------------------------------------------------

template <typename V, bool kWarp>
__global__ void SoftmaxGradRows(const V* y, const V* g, V* out, int64_t rows, int64_t len) {
  using T = Compute<V>;
  const RowGroup<kWarp> grp = MakeRowGroup<kWarp>();
  for (int64_t r = grp.first_row; r < rows; r += grp.row_step) {
    const V* yr = y + r * len;
    const V* gr = g + r * len;
    T dot = T(0);
    for (int64_t a = grp.lane; a < len; a += grp.size) {
      dot += static_cast<T>(gr[a]) * static_cast<T>(yr[a]);
    }
    dot = GroupAllReduce<kWarp>(dot, AddOp{}, T(0));
    for (int64_t a = grp.lane; a < len; a += grp.size) {
      out[r * len + a] = V(static_cast<T>(yr[a]) * (static_cast<T>(gr[a]) - dot));
    }
  }
}

template <typename V>
__global__ void SoftmaxGradColumns(const V* y, const V* g, V* out, int64_t outer, int64_t len,
                                   int64_t inner) {
  using T = Compute<V>;
  const int64_t total = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    const int64_t o = t / inner;
    const int64_t base = o * len * inner + (t - o * inner);
    T dot = T(0);
    for (int64_t a = 0; a < len; ++a) {
      dot += static_cast<T>(g[base + a * inner]) * static_cast<T>(y[base + a * inner]);
    }
    for (int64_t a = 0; a < len; ++a) {
      const int64_t at = base + a * inner;
      out[at] = V(static_cast<T>(y[at]) * (static_cast<T>(g[at]) - dot));
    }
  }
}

Tensors SoftmaxGrad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  plan::PlanSoftmaxGrad(plan::ShapesOf(inputs));
  const Tensor& out_t = inputs[0];
  const Tensor& grad_t = inputs[1];
  const AxisView v = ViewFromAxisAttr(out_t, attrs);
  if (TwoByteWithIntegerValues(inputs, {0, 1})) return WidenTwoByte(inputs, attrs, SoftmaxGrad);
  const DType dtype = ComputeDType(inputs, {0, 1});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& y = temps.As(out_t, dtype);
  const Tensor& g = temps.As(grad_t, dtype);
  Tensor x_grad = NewChecked(out_t, out_t.shape(), dtype);
  if (x_grad.numel() == 0) return TensorList(std::move(x_grad));
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    if (v.inner == 1) {
      const RowLaunch l = PlanRows(v.outer, v.len);
      if (l.warp) {
        SoftmaxGradRows<V, true><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(y), DataOf<V>(g), DataOf<V>(x_grad), v.outer, v.len);
      } else {
        SoftmaxGradRows<V, false><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(y), DataOf<V>(g), DataOf<V>(x_grad), v.outer, v.len);
      }
    } else {
      SoftmaxGradColumns<V><<<GridFor(v.outer * v.inner, kBlock), kBlock, 0, ctx.stream>>>(
          DataOf<V>(y), DataOf<V>(g), DataOf<V>(x_grad), v.outer, v.len, v.inner);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(x_grad));
}

}  // namespace

// The softmax family's CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::softmax{&SoftmaxOp<false>, HalfInputs::kNative};
const CudaKernel ops::log_softmax{&SoftmaxOp<true>, HalfInputs::kNative};
const CudaKernel ops::softmax_grad{&SoftmaxGrad, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
