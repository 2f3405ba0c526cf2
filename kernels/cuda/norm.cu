// CUDA kernels of the normalisation family (the ops of kernels/cpu/norm.cc): softmax,
// log_softmax, softmax_grad, layer_norm, rms_norm, lookup_table_v2,
// cross_entropy_with_softmax, embedding_grad, cross_entropy_with_softmax_grad,
// layer_norm_grad, rms_norm_grad.
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
#include "rules/local_attrs.h"
#include "rules/norm_plan.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::AxisView;
using cpu::internal::CheckArity;
using cpu::internal::ComputeDType;
using cpu::internal::InputField;

constexpr unsigned kBlock = 256;
constexpr unsigned long long kNone = ~0ull;

template <typename T>
__device__ __forceinline__ T QuietNan() {
  return std::numeric_limits<T>::quiet_NaN();
}

// ---- Launch shapes ---------------------------------------------------------------------------

// A warp per row (8 rows per 256-thread block) for rows of up to 256 elements, else a block
// per row (RowsConfig: the warp multiple covering the row, at most 1024 threads).
struct RowLaunch {
  bool warp = true;
  unsigned grid = 0;
  unsigned block = 0;
};
RowLaunch PlanRows(int64_t rows, int64_t len) {
  RowLaunch l;
  if (rows <= 0) return l;
  if (len <= 256) {
    l.warp = true;
    l.block = kBlock;
    l.grid = GridFor((rows + 7) / 8, 1);
    return l;
  }
  const LaunchConfig c = RowsConfig(rows, len);
  l.warp = false;
  l.grid = c.grid;
  l.block = c.block;
  return l;
}

// ---- Ids ------------------------------------------------------------------------------------

template <typename V>
constexpr bool kFloatId = !std::is_same_v<V, int64_t> && !std::is_same_v<V, bool>;

template <typename V>
__device__ __forceinline__ double IdValue(V v) {
  return static_cast<double>(static_cast<Compute<V>>(v));
}

// Writes ids[t] as int64 and records the first position of a float id that is not a whole
// number within 9e15 (status[0]) and of an id outside [0, limit) (status[1]; limit < 0: no
// upper bound; ids equal to `ignore` are not checked when has_ignore).
template <typename V>
__global__ void ValidateIds(const V* ids, int64_t n, int64_t limit, bool has_ignore,
                            int64_t ignore, int64_t* out, unsigned long long* status) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += step) {
    int64_t id;
    if constexpr (kFloatId<V>) {
      const double v = IdValue(ids[t]);
      if (!(v - v == 0.0) || v != trunc(v) || fabs(v) > 9.0e15) {
        atomicMin(&status[0], static_cast<unsigned long long>(t));
        out[t] = 0;
        continue;
      }
      id = static_cast<int64_t>(v);
    } else {
      id = static_cast<int64_t>(ids[t]);
    }
    out[t] = id;
    if (has_ignore && id == ignore) continue;
    if (id < 0 || (limit >= 0 && id >= limit)) {
      atomicMin(&status[1], static_cast<unsigned long long>(t));
    }
  }
}

struct IdRules {
  std::string field;      // inputs[i].data
  std::string noun;       // "id" or "label" in the range message
  int64_t limit = -1;     // ids must be < limit (none when negative)
  bool has_ignore = false;
  int64_t ignore = 0;
};

// The first id outside the range, when one is (CheckedIds with a deferred range check).
struct IdVerdict {
  bool bad = false;
  int64_t id = 0;
  void ThrowIfBad(const IdRules& rules) const {
    if (bad) plan::ThrowIdOutside(rules.field, rules.noun, id, rules.limit);
  }
};

// `ids` (any dtype) as int64 on `like`'s stream, after the CPU kernels' checks: a float id
// that is not a whole number or beyond 9e15 (plan::ThrowBadFloatId), the first in order;
// then the first id outside the range, thrown here or, with `deferred`, left there for the
// caller to throw where the CPU kernel checks ranges (after allocating its output). Reads
// the verdict back: synchronizes `stream`.
Tensor CheckedIds(const Tensor& ids, const IdRules& rules, const Tensor& like,
                  cudaStream_t stream, IdVerdict* deferred = nullptr) {
  Tensor out = NewOutput(like, ids.shape(), DType::kInt64);
  const int64_t n = ids.numel();
  if (n == 0) return out;
  Tensor status = Scratch(like, 2 * static_cast<int64_t>(sizeof(unsigned long long)));
  auto* st = reinterpret_cast<unsigned long long*>(status.bytes());
  SPMD_CUDA_CHECK(cudaMemsetAsync(st, 0xff, 2 * sizeof(unsigned long long), stream));
  DispatchAny(ids.dtype(), rules.field, [&](auto zero) {
    using V = decltype(zero);
    ValidateIds<V><<<GridFor(n, kBlock), kBlock, 0, stream>>>(
        DataOf<V>(ids), n, rules.limit, rules.has_ignore, rules.ignore, DataOf<int64_t>(out), st);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  unsigned long long verdict[2] = {kNone, kNone};
  SPMD_CUDA_CHECK(cudaMemcpyAsync(verdict, st, sizeof verdict, cudaMemcpyDeviceToHost, stream));
  SPMD_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (verdict[0] != kNone) {
    double v = 0.0;
    DispatchAny(ids.dtype(), rules.field, [&](auto zero) {
      using V = decltype(zero);
      V host{};
      SPMD_CUDA_CHECK(cudaMemcpy(&host, DataOf<V>(ids) + verdict[0], sizeof(V),
                                 cudaMemcpyDeviceToHost));
      if constexpr (kFloatId<V>) v = static_cast<double>(static_cast<Compute<V>>(host));
    });
    plan::ThrowBadFloatId(rules.field, v);
  }
  if (verdict[1] != kNone) {
    int64_t id = 0;
    SPMD_CUDA_CHECK(cudaMemcpy(&id, DataOf<int64_t>(out) + verdict[1], sizeof id,
                               cudaMemcpyDeviceToHost));
    if (deferred == nullptr) plan::ThrowIdOutside(rules.field, rules.noun, id, rules.limit);
    *deferred = {true, id};
  }
  return out;
}

// ---- softmax, log_softmax ---------------------------------------------------------------------

// The running max m of a set and the sum s of exp(v - m) over it. An element v is {v, 1};
// a NaN is {-inf, NaN} and +inf is {+inf, NaN}: the CPU's sum of exp(v - max) is NaN then
// (exp(NaN), exp(inf - inf)), and so is every output; -inf is {-inf, 1}, which the merge
// turns into exp(-inf - m) = 0 unless every element is -inf (then every output is NaN, as
// exp(-inf + inf) on the CPU).
template <typename T>
struct MaxSum {
  T m;
  T s;
};
template <typename T>
__device__ __forceinline__ MaxSum<T> LoadMaxSum(T v) {
  if (v != v) return {-Infinity<T>(), QuietNan<T>()};
  if (v == Infinity<T>()) return {v, QuietNan<T>()};
  return {v, T(1)};
}
template <typename T>
struct MergeMaxSum {
  __device__ MaxSum<T> operator()(MaxSum<T> p, MaxSum<T> q) const {
    const T m = q.m > p.m ? q.m : p.m;
    const T s = (p.m == m ? p.s : p.s * Exp(p.m - m)) + (q.m == m ? q.s : q.s * Exp(q.m - m));
    return {m, s};
  }
};
template <typename T>
__device__ __forceinline__ MaxSum<T> NoMaxSum() {
  return {-Infinity<T>(), T(0)};
}

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

// ---- layer_norm, rms_norm ---------------------------------------------------------------------

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
      out[r * n + j] = V((static_cast<T>(xr[j]) - mu) * inv * static_cast<T>(scale[j]) +
                         static_cast<T>(bias[j]));
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

Tensors LayerNorm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::NormSplit split = plan::PlanNorm(plan::ShapesOf(inputs), attrs, 2);
  const double epsilon = attrs.GetFloat("epsilon");
  if (TwoByteWithIntegerValues(inputs, {0, 1, 2})) return WidenTwoByte(inputs, attrs, LayerNorm);
  const DType dtype = ComputeDType(inputs, {0, 1, 2});
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
          DataOf<V>(x), DataOf<V>(scale), DataOf<V>(bias), DataOf<V>(out), DataOf<V>(mean),
          DataOf<V>(variance), split.outer, split.n, eps);
    } else {
      LayerNormRows<V, false><<<l.grid, l.block, 0, ctx.stream>>>(
          DataOf<V>(x), DataOf<V>(scale), DataOf<V>(bias), DataOf<V>(out), DataOf<V>(mean),
          DataOf<V>(variance), split.outer, split.n, eps);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out), std::move(mean), std::move(variance));
}

Tensors RmsNorm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::NormSplit split = plan::PlanNorm(plan::ShapesOf(inputs), attrs, 1);
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

// x_grad, row by row (the CPU kernel's formula): xhat = (x - mean) inv, dxhat = g scale,
// x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) (rms_norm: no mean(dxhat)).
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
      const T dxhat = static_cast<T>(g[r * n + j]) * static_cast<T>(scale[j]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    const T mean_dxhat =
        kLayerNorm ? GroupAllReduce<kWarp>(sum_dxhat, AddOp{}, T(0)) / tn : T(0);
    const T mean_dxhat_xhat = GroupAllReduce<kWarp>(sum_dxhat_xhat, AddOp{}, T(0)) / tn;
    for (int64_t j = grp.lane; j < n; j += grp.size) {
      const T xhat = (static_cast<T>(x[r * n + j]) - mu) * inv;
      const T dxhat = static_cast<T>(g[r * n + j]) * static_cast<T>(scale[j]);
      x_grad[r * n + j] = V((dxhat - mean_dxhat - xhat * mean_dxhat_xhat) * inv);
    }
  }
}

// scale_grad[j] = sum over the rows of g xhat, bias_grad[j] (when given) of g: a thread per
// column walks the rows in order (a fixed order: bitwise reproducible).
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
    scale_grad[j] = V(sg);
    if (bias_grad != nullptr) bias_grad[j] = V(bg);
  }
}

// layer_norm_grad (kLayerNorm: x, scale, bias, mean, variance, out_grad) and rms_norm_grad
// (x, scale, invvar, out_grad), planned by plan::PlanNormGrad.
template <bool kLayerNorm>
Tensors NormGrad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  constexpr size_t kParams = kLayerNorm ? 2 : 1;
  const plan::NormSplit shape = plan::PlanNormGrad(plan::ShapesOf(inputs), attrs, kParams, kParams);
  // Every input is a value input (the arity is checked: indices past it are skipped).
  if (TwoByteWithIntegerValues(inputs, {0, 1, 2, 3, 4, 5})) {
    return WidenTwoByte(inputs, attrs, NormGrad<kLayerNorm>);
  }
  const DType dtype = cpu::internal::ComputeDTypeAll(inputs);
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
  Tensor scale_grad = NewChecked(inputs[0], {shape.n}, dtype);
  Tensor bias_grad;
  if (kLayerNorm) bias_grad = NewChecked(inputs[0], {shape.n}, dtype);
  DispatchFloating(dtype, InputField(0, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    using T = Compute<V>;
    const T eps = static_cast<T>(epsilon);
    const V* var = variance != nullptr ? DataOf<V>(*variance) : nullptr;
    const RowLaunch l = PlanRows(shape.outer, shape.n);
    if (l.grid > 0) {
      if (l.warp) {
        NormGradRows<V, kLayerNorm, true><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(x), DataOf<V>(scale), DataOf<V>(stats), var, DataOf<V>(g),
            DataOf<V>(x_grad), shape.outer, shape.n, eps);
      } else {
        NormGradRows<V, kLayerNorm, false><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(x), DataOf<V>(scale), DataOf<V>(stats), var, DataOf<V>(g),
            DataOf<V>(x_grad), shape.outer, shape.n, eps);
      }
      SPMD_CUDA_CHECK_LAUNCH();
    }
    NormGradColumns<V, kLayerNorm><<<GridFor(shape.n, kBlock), kBlock, 0, ctx.stream>>>(
        DataOf<V>(x), DataOf<V>(stats), var, DataOf<V>(g), DataOf<V>(scale_grad),
        kLayerNorm ? DataOf<V>(bias_grad) : nullptr, shape.outer, shape.n, eps);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  if (kLayerNorm) return TensorList(std::move(x_grad), std::move(scale_grad), std::move(bias_grad));
  return TensorList(std::move(x_grad), std::move(scale_grad));
}

// ---- lookup_table_v2, embedding_grad ----------------------------------------------------------

// out[t, h] = weight[id_t - start, h], 0 for the padding id and ids outside the shard.
template <typename V>
__global__ void Gather(const int64_t* ids, const V* weight, V* out, int64_t count, int64_t vocab,
                       int64_t hidden, int64_t start, int64_t padding_idx) {
  const int64_t total = count * hidden;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t t = e / hidden;
    const int64_t h = e - t * hidden;
    const int64_t id = ids[t];
    const int64_t row = id - start;  // no overflow: 0 <= id, 0 <= start
    const bool zero = (padding_idx >= 0 && id == padding_idx) || row < 0 || row >= vocab;
    out[e] = zero ? V(Compute<V>(0)) : weight[row * hidden + h];
  }
}

// lookup_table_v2 (ids, weight) and c_embedding (weight, ids): the Gather above, planned by
// plan::PlanLookupTable / PlanCEmbedding.
template <bool kC>
Tensors Embedding(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::EmbeddingPlan p = kC ? plan::PlanCEmbedding(plan::ShapesOf(inputs), attrs)
                                   : plan::PlanLookupTable(plan::ShapesOf(inputs), attrs);
  const Tensor& ids_t = inputs[p.ids_at];
  CallContext ctx(inputs);
  const IdRules rules{InputField(p.ids_at, "data"), "id", p.id_limit};
  IdVerdict bad;
  const Tensor ids = CheckedIds(ids_t, rules, ids_t, ctx.stream, &bad);
  const DType dtype = ComputeDType(inputs, {p.weight_at});
  Temporaries temps(ctx.stream);
  const Tensor& weight = temps.As(inputs[p.weight_at], dtype);
  Tensor out = NewChecked(ids_t, p.out_shape, dtype);
  bad.ThrowIfBad(rules);
  const int64_t count = ids_t.numel();
  if (count * p.hidden == 0) return TensorList(std::move(out));
  DispatchFloating(dtype, InputField(p.weight_at, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    Gather<V><<<GridFor(count * p.hidden, kBlock), kBlock, 0, ctx.stream>>>(
        DataOf<int64_t>(ids), DataOf<V>(weight), DataOf<V>(out), count, p.vocab, p.hidden, p.start,
        p.padding_idx);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}
Tensors LookupTable(const TensorArgs& inputs, const Attrs& attrs) { return Embedding<false>(inputs, attrs); }
Tensors CEmbedding(const TensorArgs& inputs, const Attrs& attrs) { return Embedding<true>(inputs, attrs); }

// weight_grad[id_t - start, h] += out_grad[t, h] (atomics: float32 / float64 only).
template <typename T>
__global__ void ScatterAdd(const int64_t* ids, const T* grad, T* weight_grad, int64_t count,
                           int64_t vocab, int64_t hidden, int64_t start, int64_t padding_idx) {
  const int64_t total = count * hidden;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t t = e / hidden;
    const int64_t h = e - t * hidden;
    const int64_t id = ids[t];
    const int64_t row = id - start;
    if ((padding_idx >= 0 && id == padding_idx) || row < 0 || row >= vocab) continue;
    atomicAdd(weight_grad + row * hidden + h, grad[e]);
  }
}

// weight_grad [V, H] with out_grad's rows added at id - start (embedding_grad,
// c_embedding_grad: plan::PlanEmbeddingGrad / PlanCEmbeddingGrad).
Tensor ScatterRows(const TensorArgs& inputs, const plan::EmbeddingPlan& p, DType dtype) {
  const Tensor& ids_t = inputs[p.ids_at];
  const Tensor& grad_t = inputs[2];
  CallContext ctx(inputs);
  const IdRules rules{InputField(p.ids_at, "data"), "id", p.id_limit};
  IdVerdict bad;
  const Tensor ids = CheckedIds(ids_t, rules, ids_t, ctx.stream, &bad);
  Temporaries temps(ctx.stream);
  const Tensor& grad = temps.As(grad_t, dtype);
  Tensor weight_grad = NewChecked(ids_t, p.out_shape, dtype);
  bad.ThrowIfBad(rules);
  if (weight_grad.nbytes() > 0) {
    SPMD_CUDA_CHECK(cudaMemsetAsync(weight_grad.bytes(), 0, weight_grad.nbytes(), ctx.stream));
  }
  const int64_t count = ids_t.numel();
  if (count * p.hidden == 0) return weight_grad;
  // RunCudaKernel widens 2-byte floats (takes_half false): float32 or float64 here.
  DispatchFloating(dtype, InputField(2, "dtype"), /*half=*/false, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {  // atomicAdd's
      ScatterAdd<T><<<GridFor(count * p.hidden, kBlock), kBlock, 0, ctx.stream>>>(
          DataOf<int64_t>(ids), DataOf<T>(grad), DataOf<T>(weight_grad), count, p.vocab, p.hidden,
          p.start, p.padding_idx);
      SPMD_CUDA_CHECK_LAUNCH();
    }
  });
  return weight_grad;
}

Tensors EmbeddingGrad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  return TensorList(ScatterRows(inputs, p, ComputeDType(inputs, {1, 2})));
}

Tensors CEmbeddingGrad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanCEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  return TensorList(ScatterRows(inputs, p, ComputeDType(inputs, {0, 2})));
}

// ---- cross_entropy_with_softmax ---------------------------------------------------------------

// One row of [rows, C] (the class axis last): p = softmax(x) (or x itself), written; the
// loss: -log p[label] (0 for ignore_index), or -sum(label * log p) for soft labels.
template <typename V, bool kWarp>
__global__ void CrossEntropyRows(const V* x, const int64_t* ids, const V* soft, V* probs,
                                 V* loss, int64_t rows, int64_t len, bool use_softmax,
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
      if (soft != nullptr) acc += static_cast<T>(soft[r * len + a]) * Log(p);
    }
    if (soft != nullptr) {
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
__global__ void CrossEntropyColumns(const V* x, const int64_t* ids, const V* soft, V* probs,
                                    V* loss, int64_t outer, int64_t len, int64_t inner,
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
      if (soft != nullptr) acc += static_cast<T>(soft[base + a * inner]) * Log(p);
    }
    if (soft != nullptr) {
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
            DataOf<V>(logits), id, sl, DataOf<V>(probs), DataOf<V>(loss), v.outer, v.len,
            ce.use_softmax, ce.ignore_index);
      } else {
        CrossEntropyRows<V, false><<<l.grid, l.block, 0, ctx.stream>>>(
            DataOf<V>(logits), id, sl, DataOf<V>(probs), DataOf<V>(loss), v.outer, v.len,
            ce.use_softmax, ce.ignore_index);
      }
    } else {
      CrossEntropyColumns<V><<<GridFor(v.outer * v.inner, kBlock), kBlock, 0, ctx.stream>>>(
          DataOf<V>(logits), id, sl, DataOf<V>(probs), DataOf<V>(loss), v.outer, v.len, v.inner,
          ce.use_softmax, ce.ignore_index);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(probs), std::move(loss));
}

// One thread per element (r, a, i) of [outer, C, inner].
template <typename V>
__global__ void CrossEntropyGradKernel(const int64_t* ids, const V* soft, const V* p,
                                       const V* loss_grad, V* out, int64_t outer, int64_t len,
                                       int64_t inner, bool use_softmax, int64_t ignore_index) {
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
    if (soft != nullptr) {
      const T l = static_cast<T>(soft[e]);
      value = use_softmax ? (pv - l) * g : -(l * g) / pv;
    } else {
      const int64_t id = ids[row];
      if (id == ignore_index) {
        value = T(0);
      } else if (!use_softmax) {
        value = a == id ? -g / pv : T(0);
      } else {
        value = a == id ? (pv - T(1)) * g : pv * g;
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
    ids = CheckedIds(label_t, {InputField(0, "data"), "label", v.len, true, ce.ignore_index},
                     inputs[0], ctx.stream);
  }
  const int64_t total = input_grad.numel();
  if (total == 0) return TensorList(std::move(input_grad));
  DispatchFloating(dtype, InputField(1, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    CrossEntropyGradKernel<V><<<GridFor(total, kBlock), kBlock, 0, ctx.stream>>>(
        ce.soft_label ? nullptr : DataOf<int64_t>(ids), ce.soft_label ? DataOf<V>(*soft) : nullptr,
        DataOf<V>(p), DataOf<V>(g), DataOf<V>(input_grad), v.outer, v.len, v.inner,
        ce.use_softmax, ce.ignore_index);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(input_grad));
}

}  // namespace

// The normalisation and embedding ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::softmax{&SoftmaxOp<false>, HalfInputs::kNative};
const CudaKernel ops::log_softmax{&SoftmaxOp<true>, HalfInputs::kNative};
const CudaKernel ops::softmax_grad{&SoftmaxGrad, HalfInputs::kNative};
const CudaKernel ops::layer_norm{&LayerNorm, HalfInputs::kNative};
const CudaKernel ops::rms_norm{&RmsNorm, HalfInputs::kNative};
const CudaKernel ops::layer_norm_grad{&NormGrad<true>, HalfInputs::kNative};
const CudaKernel ops::rms_norm_grad{&NormGrad<false>, HalfInputs::kNative};
const CudaKernel ops::lookup_table_v2{&LookupTable, HalfInputs::kNative};
const CudaKernel ops::c_embedding{&CEmbedding, HalfInputs::kNative};
const CudaKernel ops::cross_entropy_with_softmax{&CrossEntropy, HalfInputs::kNative};
const CudaKernel ops::cross_entropy_with_softmax_grad{&CrossEntropyGrad, HalfInputs::kNative};
// Float atomics accumulate in the compute dtype: 2-byte floats are widened to float32.
const CudaKernel ops::embedding_grad{&EmbeddingGrad, HalfInputs::kWidened};
const CudaKernel ops::c_embedding_grad{&CEmbeddingGrad, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
