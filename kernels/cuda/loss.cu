// CUDA kernels of the softmax cross entropies (the ops of kernels/cpu/loss.cc):
// cross_entropy_with_softmax (fused row kernels as softmax.cu's, the loss from the row's max
// and sum of exponentials) and cross_entropy_with_softmax_grad. Hard labels are checked on
// the device as the CPU kernels check them (rows::CheckedIds), which synchronizes the stream.
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
#include "rules/ops/loss_plan.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::AxisView;
using cpu::internal::CheckArity;
using cpu::internal::ComputeDType;
using cpu::internal::InputField;
using rows::kBlock;
using rows::CheckedIds;
using rows::IdRules;
using rows::LoadMaxSum;
using rows::MaxSum;
using rows::MergeMaxSum;
using rows::NoMaxSum;
using rows::PlanRows;
using rows::QuietNan;
using rows::RowLaunch;

// ---- cross_entropy_with_softmax ---------------------------------------------------------------

// One row of [rows, C] (the class axis last): p = softmax(x) (or x itself), written; the
// loss: -log p[label] (0 for ignore_index), or -sum(label * log p) for soft labels. Which
// label it is comes from `soft_label`, not from the pointers: with C = 0 the soft labels are
// empty and their pointer is null (the loss then is -0, an empty sum).
template <typename V, bool kWarp>
__global__ void CrossEntropyRows(const V* x, const int64_t* ids, const V* soft, bool soft_label,
                                 V* probs, V* loss, int64_t rows, int64_t len, bool use_softmax,
                                 int64_t ignore_index) {
  using T = Compute<V>;
  const RowGroup<kWarp> g = MakeRowGroup<kWarp>();
  for (int64_t r = g.first_row; r < rows; r += g.row_step) {
    const V* xr = x + r * len;
    MaxSum<T> ms = NoMaxSum<T>();
    if (use_softmax) {
      for (int64_t a = g.lane; a < len; a += g.size) {
        ms = MergeMaxSum<T>{}(ms, LoadMaxSum(static_cast<T>(xr[a])));
      }
      ms = GroupAllReduce<kWarp>(ms, MergeMaxSum<T>{}, NoMaxSum<T>());
    }
    auto p_at = [&](int64_t a) {
      const T v = static_cast<T>(xr[a]);
      return use_softmax ? Exp(v - ms.m) / ms.s : v;
    };
    T acc = T(0);
    for (int64_t a = g.lane; a < len; a += g.size) {
      const T p = p_at(a);
      probs[r * len + a] = V(p);
      if (soft_label) acc += static_cast<T>(soft[r * len + a]) * Log(p);
    }
    if (soft_label) {
      acc = GroupAllReduce<kWarp>(acc, AddOp{}, T(0));
      if (g.lane == 0) loss[r] = V(-acc);
    } else if (g.lane == 0) {
      const int64_t id = ids[r];
      loss[r] = id == ignore_index ? V(T(0)) : V(-Log(p_at(id)));
    }
  }
}

// One thread per (o, i) of [outer, C, inner].
template <typename V>
__global__ void CrossEntropyColumns(const V* x, const int64_t* ids, const V* soft, bool soft_label,
                                    V* probs, V* loss, int64_t outer, int64_t len, int64_t inner,
                                    bool use_softmax, int64_t ignore_index) {
  using T = Compute<V>;
  const int64_t total = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    const int64_t o = t / inner;
    const int64_t base = o * len * inner + (t - o * inner);
    MaxSum<T> ms = NoMaxSum<T>();
    if (use_softmax) {
      for (int64_t a = 0; a < len; ++a) {
        ms = MergeMaxSum<T>{}(ms, LoadMaxSum(static_cast<T>(x[base + a * inner])));
      }
    }
    auto p_at = [&](int64_t a) {
      const T v = static_cast<T>(x[base + a * inner]);
      return use_softmax ? Exp(v - ms.m) / ms.s : v;
    };
    T acc = T(0);
    for (int64_t a = 0; a < len; ++a) {
      const T p = p_at(a);
      probs[base + a * inner] = V(p);
      if (soft_label) acc += static_cast<T>(soft[base + a * inner]) * Log(p);
    }
    if (soft_label) {
      loss[t] = V(-acc);
    } else {
      const int64_t id = ids[t];
      loss[t] = id == ignore_index ? V(T(0)) : V(-Log(p_at(id)));
    }
  }
}

Tensors CrossEntropy(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropy(plan::ShapesOf(inputs), attrs);
  const Tensor& logits_t = inputs[0];
  const Tensor& label_t = inputs[1];
  const AxisView v = cpu::internal::ViewAlong(logits_t.shape(), ce.axis);
  if (ce.soft_label && TwoByteWithIntegerValues(inputs, {0, 1})) {
    return WidenTwoByte(inputs, attrs, CrossEntropy);
  }
  const DType dtype = ce.soft_label ? ComputeDType(inputs, {0, 1}) : ComputeDType(inputs, {0});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& logits = temps.As(logits_t, dtype);
  Tensor probs = NewChecked(inputs[0], logits_t.shape(), dtype);
  Tensor loss = NewChecked(inputs[0], ce.loss_shape, dtype);
  // Hard labels are checked (and read as int64) before anything is computed: the CPU
  // kernel computes the softmax first, but its outputs are dropped on the error anyway.
  Tensor ids;
  const Tensor* soft = nullptr;
  if (ce.soft_label) {
    soft = &temps.As(label_t, dtype);
  } else {
    ids = CheckedIds(label_t, {InputField(1, "data"), "label", v.len, true, ce.ignore_index},
                     inputs[0], ctx.stream);
  }
  if (v.outer * v.inner == 0) return TensorList(std::move(probs), std::move(loss));
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    const int64_t* id = ce.soft_label ? nullptr : DataOf<int64_t>(ids);
    const V* sl = ce.soft_label ? DataOf<V>(*soft) : nullptr;
    if (v.inner == 1) {
      const RowLaunch l = PlanRows(v.outer, v.len);
      if (l.warp) {
        CrossEntropyRows<V, true><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(logits), id, sl, ce.soft_label, DataOf<V>(probs), DataOf<V>(loss),
            v.outer, v.len, ce.use_softmax, ce.ignore_index);
      } else {
        CrossEntropyRows<V, false><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(logits), id, sl, ce.soft_label, DataOf<V>(probs), DataOf<V>(loss),
            v.outer, v.len, ce.use_softmax, ce.ignore_index);
      }
    } else {
      CrossEntropyColumns<V><<<GridFor(v.outer * v.inner, kBlock), kBlock, 0, ctx.stream>>>(
          DataOf<V>(logits), id, sl, ce.soft_label, DataOf<V>(probs), DataOf<V>(loss), v.outer,
          v.len, v.inner, ce.use_softmax, ce.ignore_index);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(probs), std::move(loss));
}

// One thread per element (r, a, i) of [outer, C, inner].
template <typename V>
__global__ void CrossEntropyGradKernel(const int64_t* ids, const V* soft, bool soft_label,
                                       const V* p, const V* loss_grad, V* out, int64_t outer,
                                       int64_t len, int64_t inner, bool use_softmax,
                                       int64_t ignore_index, int64_t class_start) {
  using T = Compute<V>;
  const int64_t total = outer * len * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t i = e % inner;
    const int64_t q = e / inner;
    const int64_t a = q % len;
    const int64_t r = q / len;
    const int64_t row = r * inner + i;
    const T g = static_cast<T>(loss_grad[row]);
    const T pv = static_cast<T>(p[e]);
    T value;
    if (soft_label) {
      const T l = static_cast<T>(soft[e]);
      value = use_softmax ? (pv - l) * g : -(l * g) / pv;
    } else {
      const int64_t id = ids[row];
      const int64_t a_global = a + class_start;  // this element's class
      if (id == ignore_index) {
        value = T(0);
      } else if (!use_softmax) {
        value = a_global == id ? -g / pv : T(0);
      } else {
        value = a_global == id ? (pv - T(1)) * g : pv * g;
      }
    }
    out[e] = V(value);
  }
}

Tensors CrossEntropyGrad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropyGrad(plan::ShapesOf(inputs), attrs);
  const Tensor& label_t = inputs[0];
  const Tensor& softmax_t = inputs[1];
  const Tensor& loss_grad_t = inputs[2];
  const AxisView v = cpu::internal::ViewAlong(softmax_t.shape(), ce.axis);
  if (ce.soft_label ? TwoByteWithIntegerValues(inputs, {0, 1, 2})
                 : TwoByteWithIntegerValues(inputs, {1, 2})) {
    return WidenTwoByte(inputs, attrs, CrossEntropyGrad);
  }
  const DType dtype =
      ce.soft_label ? ComputeDType(inputs, {0, 1, 2}) : ComputeDType(inputs, {1, 2});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& p = temps.As(softmax_t, dtype);
  const Tensor& g = temps.As(loss_grad_t, dtype);
  Tensor input_grad = NewChecked(inputs[0], softmax_t.shape(), dtype);
  Tensor ids;
  const Tensor* soft = nullptr;
  if (ce.soft_label) {
    soft = &temps.As(label_t, dtype);
  } else {
    ids = CheckedIds(label_t, {InputField(0, "data"), "label", ce.classes, true, ce.ignore_index},
                     inputs[0], ctx.stream);
  }
  const int64_t total = input_grad.numel();
  if (total == 0) return TensorList(std::move(input_grad));
  DispatchFloating(dtype, InputField(1, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    CrossEntropyGradKernel<V><<<GridFor(total, kBlock), kBlock, 0, ctx.stream>>>(
        ce.soft_label ? nullptr : DataOf<int64_t>(ids), ce.soft_label ? DataOf<V>(*soft) : nullptr,
        ce.soft_label, DataOf<V>(p), DataOf<V>(g), DataOf<V>(input_grad), v.outer, v.len, v.inner,
        ce.use_softmax, ce.ignore_index, ce.class_start);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(input_grad));
}

}  // namespace

// The softmax cross entropies' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::cross_entropy_with_softmax{&CrossEntropy, HalfInputs::kNative};
const CudaKernel ops::cross_entropy_with_softmax_grad{&CrossEntropyGrad, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
