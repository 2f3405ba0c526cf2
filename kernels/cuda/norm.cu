// CUDA kernels of the normalisations (the ops of kernels/cpu/norm.cc): layer_norm, rms_norm,
// layer_norm_grad, rms_norm_grad; with them the shared description of the row kernels of
// softmax.cu, embedding.cu and loss.cu (their helpers: kernels/cuda/rows.cuh).
//
// Row ops (the normalised dims last, inner == 1) are fused row kernels: a warp per row for
// rows of up to 256 elements, else a block per row, with warp-shuffle reductions.
// softmax, log_softmax and cross_entropy_with_softmax take the row's max and sum of
// exponentials in one pass (an online max / rescaled sum merged across threads) and write
// in a second; layer_norm sums the row, then its squared deviations from the mean (the CPU
// kernel's two-pass formula, no E[x^2] - E[x]^2 cancellation), then writes; rms_norm sums
// squares, then writes; layer_norm_grad and rms_norm_grad take a row's sums of dxhat and
// dxhat xhat, then write x_grad, and a thread per column walks the rows in order for
// scale_grad and bias_grad. Along an inner axis (inner > 1) a thread owns one column and
// walks it in order. Every reduction has a fixed order for a given shape: bitwise reproducible
// run to run, except embedding_grad (float atomics: the order of the additions varies).
//
// Dtypes: float32 and float64 in their own type; bfloat16 / float16 are read and written
// as they are, computed in float32 (HalfInputs::kNative) except embedding_grad (widened by
// RunCudaKernel, so that its sums accumulate in float32). int64 / bool value inputs are
// converted to float64 (or to the floating input's dtype) as the CPU kernels convert them.
//
// Ids and hard labels (any dtype, validated as the CPU kernels validate them: whole numbers
// of at most 9e15, in range unless ignored) are checked by a kernel whose verdict the host
// reads back: lookup_table_v2, embedding_grad and the hard-label cross entropies therefore
// synchronize their stream once per call, to throw the CPU kernels' SpmdError (type, field
// and message) for a bad id.
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
#include "rules/ops/norm_plan.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::AxisView;
using cpu::internal::CheckArity;
using cpu::internal::ComputeDType;
using cpu::internal::InputField;
using rows::kBlock;
using rows::PlanRows;
using rows::QuietNan;
using rows::RowLaunch;

// ---- layer_norm, rms_norm ---------------------------------------------------------------------

// layer_norm's absent (0-d) scale is null (1), its absent bias null (0).
template <typename V, bool kWarp>
__global__ void LayerNormRows(const V* x, const V* scale, const V* bias, V* out, V* mean,
                              V* variance, int64_t rows, int64_t n, Compute<V> eps) {
  using T = Compute<V>;
  const RowGroup<kWarp> g = MakeRowGroup<kWarp>();
  const T tn = static_cast<T>(static_cast<double>(n));
  for (int64_t r = g.first_row; r < rows; r += g.row_step) {
    const V* xr = x + r * n;
    T sum = T(0);
    for (int64_t j = g.lane; j < n; j += g.size) sum += static_cast<T>(xr[j]);
    const T mu = GroupAllReduce<kWarp>(sum, AddOp{}, T(0)) / tn;
    T sq = T(0);
    for (int64_t j = g.lane; j < n; j += g.size) {
      const T d = static_cast<T>(xr[j]) - mu;
      sq += d * d;
    }
    const T var = GroupAllReduce<kWarp>(sq, AddOp{}, T(0)) / tn;
    const T inv = T(1) / Sqrt(var + eps);
    for (int64_t j = g.lane; j < n; j += g.size) {
      const T s = scale != nullptr ? static_cast<T>(scale[j]) : T(1);
      const T b = bias != nullptr ? static_cast<T>(bias[j]) : T(0);
      out[r * n + j] = V((static_cast<T>(xr[j]) - mu) * inv * s + b);
    }
    if (g.lane == 0) {
      mean[r] = V(mu);
      variance[r] = V(var);
    }
  }
}

template <typename V, bool kWarp>
__global__ void RmsNormRows(const V* x, const V* scale, V* out, V* invvar, int64_t rows,
                            int64_t n, Compute<V> eps) {
  using T = Compute<V>;
  const RowGroup<kWarp> g = MakeRowGroup<kWarp>();
  const T tn = static_cast<T>(static_cast<double>(n));
  for (int64_t r = g.first_row; r < rows; r += g.row_step) {
    const V* xr = x + r * n;
    T sq = T(0);
    for (int64_t j = g.lane; j < n; j += g.size) {
      const T v = static_cast<T>(xr[j]);
      sq += v * v;
    }
    sq = GroupAllReduce<kWarp>(sq, AddOp{}, T(0));
    const T inv = T(1) / Sqrt(sq / tn + eps);
    for (int64_t j = g.lane; j < n; j += g.size) {
      out[r * n + j] = V(static_cast<T>(xr[j]) * inv * static_cast<T>(scale[j]));
    }
    if (g.lane == 0) invvar[r] = V(inv);
  }
}

// The compute dtype of layer_norm's (or its grad's) value inputs: x, the given parameters
// (an absent one's dtype is not read, as the CPU kernel's) and `more`, in input order.
DType LayerNormDType(const TensorArgs& inputs, const plan::NormSplit& split, std::vector<size_t> more) {
  std::vector<size_t> read{0};
  if (split.has_scale) read.push_back(1);
  if (split.has_bias) read.push_back(2);
  read.insert(read.end(), more.begin(), more.end());
  return cpu::internal::ComputeDTypeOver(inputs, read);
}

// A tensor's data, or null for layer_norm's absent parameter (or its gradient).
template <typename V>
const V* DataOrNull(const Tensor& t, bool present) {
  return present ? DataOf<V>(t) : nullptr;
}
template <typename V>
V* DataOrNull(Tensor& t, bool present) {
  return present ? DataOf<V>(t) : nullptr;
}

Tensors LayerNorm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::NormSplit split = plan::PlanLayerNorm(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  if (TwoByteWithIntegerValues(inputs, {0, 1, 2})) return WidenTwoByte(inputs, attrs, LayerNorm);
  const DType dtype = LayerNormDType(inputs, split, {});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = temps.As(inputs[0], dtype);
  const Tensor& scale = temps.As(inputs[1], dtype);
  const Tensor& bias = temps.As(inputs[2], dtype);
  Tensor out = NewChecked(inputs[0], inputs[0].shape(), dtype);
  Tensor mean = NewChecked(inputs[0], split.stats_shape, dtype);
  Tensor variance = NewChecked(inputs[0], split.stats_shape, dtype);
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    using T = Compute<V>;
    const RowLaunch l = PlanRows(split.outer, split.n);
    if (l.grid == 0) return;
    const T eps = static_cast<T>(epsilon);
    if (l.warp) {
      LayerNormRows<V, true><<<l.grid, l.block, 0, ctx.stream>>>(
          DataOf<V>(x), DataOrNull<V>(scale, split.has_scale), DataOrNull<V>(bias, split.has_bias), DataOf<V>(out),
          DataOf<V>(mean),
          DataOf<V>(variance), split.outer, split.n, eps);
    } else {
      LayerNormRows<V, false><<<l.grid, l.block, 0, ctx.stream>>>(
          DataOf<V>(x), DataOrNull<V>(scale, split.has_scale), DataOrNull<V>(bias, split.has_bias), DataOf<V>(out),
          DataOf<V>(mean),
          DataOf<V>(variance), split.outer, split.n, eps);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out), std::move(mean), std::move(variance));
}

Tensors RmsNorm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::NormSplit split = plan::PlanRmsNorm(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  if (TwoByteWithIntegerValues(inputs, {0, 1})) return WidenTwoByte(inputs, attrs, RmsNorm);
  const DType dtype = ComputeDType(inputs, {0, 1});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = temps.As(inputs[0], dtype);
  const Tensor& scale = temps.As(inputs[1], dtype);
  Tensor out = NewChecked(inputs[0], inputs[0].shape(), dtype);
  Tensor invvar = NewChecked(inputs[0], split.stats_shape, dtype);
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    using T = Compute<V>;
    const RowLaunch l = PlanRows(split.outer, split.n);
    if (l.grid == 0) return;
    const T eps = static_cast<T>(epsilon);
    if (l.warp) {
      RmsNormRows<V, true><<<l.grid, l.block, 0, ctx.stream>>>(
          DataOf<V>(x), DataOf<V>(scale), DataOf<V>(out), DataOf<V>(invvar), split.outer,
          split.n, eps);
    } else {
      RmsNormRows<V, false><<<l.grid, l.block, 0, ctx.stream>>>(
          DataOf<V>(x), DataOf<V>(scale), DataOf<V>(out), DataOf<V>(invvar), split.outer,
          split.n, eps);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out), std::move(invvar));
}

// ---- layer_norm_grad, rms_norm_grad ------------------------------------------------------------

// A row's inverse deviation and centre: 1/sqrt(variance + eps) and the mean (kLayerNorm), or
// the forward's invvar and 0.
template <typename V, bool kLayerNorm>
__device__ __forceinline__ void RowInvAndMean(const V* stats, const V* variance, int64_t r,
                                              Compute<V> eps, Compute<V>& inv, Compute<V>& mu) {
  using T = Compute<V>;
  if constexpr (kLayerNorm) {
    inv = T(1) / Sqrt(static_cast<T>(variance[r]) + eps);
    mu = static_cast<T>(stats[r]);
  } else {
    inv = static_cast<T>(stats[r]);
    mu = T(0);
  }
}

// x_grad, row by row (the CPU kernel's formula): xhat = (x - mean) inv, dxhat = g scale
// (g where scale is null: layer_norm_grad's absent scale), x_grad = inv (dxhat - mean(dxhat)
// - xhat mean(dxhat xhat)) (rms_norm: no mean(dxhat)).
template <typename V, bool kLayerNorm, bool kWarp>
__global__ void NormGradRows(const V* x, const V* scale, const V* stats, const V* variance,
                             const V* g, V* x_grad, int64_t rows, int64_t n, Compute<V> eps) {
  using T = Compute<V>;
  const RowGroup<kWarp> grp = MakeRowGroup<kWarp>();
  const T tn = static_cast<T>(static_cast<double>(n));
  for (int64_t r = grp.first_row; r < rows; r += grp.row_step) {
    T inv, mu;
    RowInvAndMean<V, kLayerNorm>(stats, variance, r, eps, inv, mu);
    T sum_dxhat = T(0), sum_dxhat_xhat = T(0);
    for (int64_t j = grp.lane; j < n; j += grp.size) {
      const T xhat = (static_cast<T>(x[r * n + j]) - mu) * inv;
      const T dxhat = static_cast<T>(g[r * n + j]) * (scale != nullptr ? static_cast<T>(scale[j]) : T(1));
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    const T mean_dxhat =
        kLayerNorm ? GroupAllReduce<kWarp>(sum_dxhat, AddOp{}, T(0)) / tn : T(0);
    const T mean_dxhat_xhat = GroupAllReduce<kWarp>(sum_dxhat_xhat, AddOp{}, T(0)) / tn;
    for (int64_t j = grp.lane; j < n; j += grp.size) {
      const T xhat = (static_cast<T>(x[r * n + j]) - mu) * inv;
      const T dxhat = static_cast<T>(g[r * n + j]) * (scale != nullptr ? static_cast<T>(scale[j]) : T(1));
      x_grad[r * n + j] = V((dxhat - mean_dxhat - xhat * mean_dxhat_xhat) * inv);
    }
  }
}

// scale_grad[j] = sum over the rows of g xhat, bias_grad[j] of g, each when given (not null):
// a thread per column walks the rows in order (a fixed order: bitwise reproducible).
template <typename V, bool kLayerNorm>
__global__ void NormGradColumns(const V* x, const V* stats, const V* variance, const V* g,
                                V* scale_grad, V* bias_grad, int64_t rows, int64_t n,
                                Compute<V> eps) {
  using T = Compute<V>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += step) {
    T sg = T(0), bg = T(0);
    for (int64_t r = 0; r < rows; ++r) {
      T inv, mu;
      RowInvAndMean<V, kLayerNorm>(stats, variance, r, eps, inv, mu);
      const T gv = static_cast<T>(g[r * n + j]);
      sg += gv * ((static_cast<T>(x[r * n + j]) - mu) * inv);
      bg += gv;
    }
    if (scale_grad != nullptr) scale_grad[j] = V(sg);
    if (bias_grad != nullptr) bias_grad[j] = V(bg);
  }
}

// layer_norm_grad (kLayerNorm: x, scale, bias, mean, variance, out_grad) and rms_norm_grad
// (x, scale, invvar, out_grad), planned by plan::PlanLayerNormGrad / PlanRmsNormGrad.
// layer_norm_grad's absent (0-d) scale is 1; an absent parameter's gradient is a 0-d zero.
template <bool kLayerNorm>
Tensors NormGrad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  constexpr size_t kParams = kLayerNorm ? 2 : 1;
  const plan::NormSplit shape = kLayerNorm ? plan::PlanLayerNormGrad(plan::ShapesOf(inputs), attrs)
                                           : plan::PlanRmsNormGrad(plan::ShapesOf(inputs), attrs);
  // Every input is a value input (the arity is checked: indices past it are skipped).
  if (TwoByteWithIntegerValues(inputs, {0, 1, 2, 3, 4, 5})) {
    return WidenTwoByte(inputs, attrs, NormGrad<kLayerNorm>);
  }
  const DType dtype = kLayerNorm ? LayerNormDType(inputs, shape, {3, 4, 5}) : cpu::internal::ComputeDTypeAll(inputs);
  const double epsilon = kLayerNorm ? attrs.GetFloat("epsilon") : 0.0;
  const size_t stats_at = 1 + kParams;  // mean or invvar; variance next (layer_norm_grad)
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = temps.As(inputs[0], dtype);
  const Tensor& scale = temps.As(inputs[1], dtype);
  const Tensor& stats = temps.As(inputs[stats_at], dtype);
  const Tensor* variance = kLayerNorm ? &temps.As(inputs[stats_at + 1], dtype) : nullptr;
  const Tensor& g = temps.As(inputs[inputs.size() - 1], dtype);
  Tensor x_grad = NewChecked(inputs[0], inputs[0].shape(), dtype);
  Tensor scale_grad = NewChecked(inputs[0], shape.ParamGradShape(shape.has_scale), dtype);
  Tensor bias_grad;
  if (kLayerNorm) bias_grad = NewChecked(inputs[0], shape.ParamGradShape(shape.has_bias), dtype);
  if (!shape.has_scale) SPMD_CUDA_CHECK(cudaMemsetAsync(scale_grad.bytes(), 0, scale_grad.nbytes(), ctx.stream));
  if (kLayerNorm && !shape.has_bias) {
    SPMD_CUDA_CHECK(cudaMemsetAsync(bias_grad.bytes(), 0, bias_grad.nbytes(), ctx.stream));
  }
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    using T = Compute<V>;
    const T eps = static_cast<T>(epsilon);
    const V* var = variance != nullptr ? DataOf<V>(*variance) : nullptr;
    const RowLaunch l = PlanRows(shape.outer, shape.n);
    if (l.grid > 0) {
      if (l.warp) {
        NormGradRows<V, kLayerNorm, true><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(x), DataOrNull<V>(scale, shape.has_scale), DataOf<V>(stats), var, DataOf<V>(g),
            DataOf<V>(x_grad), shape.outer, shape.n, eps);
      } else {
        NormGradRows<V, kLayerNorm, false><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(x), DataOrNull<V>(scale, shape.has_scale), DataOf<V>(stats), var, DataOf<V>(g),
            DataOf<V>(x_grad), shape.outer, shape.n, eps);
      }
      SPMD_CUDA_CHECK_LAUNCH();
    }
    NormGradColumns<V, kLayerNorm><<<GridFor(shape.n, kBlock), kBlock, 0, ctx.stream>>>(
        DataOf<V>(x), DataOf<V>(stats), var, DataOf<V>(g), DataOrNull<V>(scale_grad, shape.has_scale),
        kLayerNorm ? DataOrNull<V>(bias_grad, shape.has_bias) : nullptr, shape.outer, shape.n, eps);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  if (kLayerNorm) return TensorList(std::move(x_grad), std::move(scale_grad), std::move(bias_grad));
  return TensorList(std::move(x_grad), std::move(scale_grad));
}

}  // namespace

// The normalisations' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::layer_norm{&LayerNorm, HalfInputs::kNative};
const CudaKernel ops::rms_norm{&RmsNorm, HalfInputs::kNative};
const CudaKernel ops::layer_norm_grad{&NormGrad<true>, HalfInputs::kNative};
const CudaKernel ops::rms_norm_grad{&NormGrad<false>, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
