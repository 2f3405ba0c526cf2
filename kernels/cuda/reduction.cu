// CUDA kernels of the reduction family (the ops of kernels/cpu/reduction.cc): sum, mean,
// max, min, prod, any, all, squared_l2_norm, mean_all, logsumexp, p_norm, frobenius_norm,
// argmax, cumsum.
//
// x is laid out as [outer, len, inner] (kernels/cuda/reduce_plan.h: the CPU kernel's
// arrangement, a permutation on the device when the reduced dims are not one block) and
// folded by one reducer (Init / Load / Combine / Finalize) in three kernels: a warp per
// row (short rows), a block per (row, piece) with warp-shuffle block reductions (long
// rows), a thread per column piece (inner > 1); pieces of a long len are folded by a
// second kernel in piece order. No atomics: a given shape always folds in the same order,
// so results are bitwise reproducible run to run (they differ from the CPU's order within
// the tolerances of docs/GPU.md, "Kernels: contractions, reductions, norms").
//
// Semantics as the CPU kernels: max/min ignore NaN (all-NaN or empty gives -inf/+inf);
// argmax compares in x's own dtype, ties and a NaN at index 0 give the first index, other
// NaNs are skipped; any/all treat NaN as true; logsumexp is max + log(sum exp(x - max)) with
// an infinite or empty max kept as it is. Dtypes: float32 and float64 in their own type,
// bfloat16/float16 stored as they are and computed in float32 (HalfInputs::kNative), int64/bool x
// converted to float64 (argmax, any, all read them as they are).
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_ops.h"
#include "kernels/cuda/math_util.cuh"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/reduce_plan.h"
#include "kernels/cuda/registry.h"
#include "rules/model/attrs.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::CheckArity;
using cpu::internal::InputField;

// ---- Reducers ---------------------------------------------------------------------------------
// In: the element type read; Acc: the running value; Out: the element type written.
// Load(v, a, o) sees the element, its position along len and its output's index.

enum class Pre { kIdentity, kSquare, kAbs, kPow };
enum class Post { kNone, kDivide, kSqrt, kPow };

// Sums of Pre(x), then Post: sum, mean, squared_l2_norm, mean_all, p_norm.
template <typename InT, typename OutT>
struct SumReducer {
  using In = InT;
  using Out = OutT;
  using Acc = Compute<In>;
  Pre pre = Pre::kIdentity;
  Post post = Post::kNone;
  Acc p = Acc(1);     // kPow: the exponent
  Acc post_value = Acc(1);  // kDivide: the divisor; kPow: 1 / p
  __device__ Acc Init() const { return Acc(0); }
  __device__ Acc Load(In v, int64_t, int64_t) const {
    const Acc t = static_cast<Acc>(v);
    switch (pre) {
      case Pre::kSquare: return t * t;
      case Pre::kAbs: return Fabs(t);
      case Pre::kPow: return Pow(Fabs(t), p);
      default: return t;
    }
  }
  __device__ Acc Combine(Acc a, Acc b) const { return a + b; }
  __device__ Out Finalize(Acc a, int64_t) const {
    switch (post) {
      case Post::kDivide: return Out(a / post_value);
      case Post::kSqrt: return Out(Sqrt(a));
      case Post::kPow: return Out(Pow(a, post_value));
      default: return Out(a);
    }
  }
};

// max / min ignoring NaN (a NaN never wins `v > acc`), as the CPU kernel's fold.
template <typename InT, typename OutT, bool kMax>
struct ExtremumReducer {
  using In = InT;
  using Out = OutT;
  using Acc = Compute<In>;
  __device__ Acc Init() const { return kMax ? -Infinity<Acc>() : Infinity<Acc>(); }
  __device__ Acc Load(In v, int64_t, int64_t) const { return static_cast<Acc>(v); }
  __device__ Acc Combine(Acc a, Acc b) const {
    if constexpr (kMax) {
      return b > a ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
  __device__ Out Finalize(Acc a, int64_t) const { return Out(a); }
};

template <typename InT>
struct ProdReducer {
  using In = InT;
  using Out = InT;
  using Acc = Compute<In>;
  __device__ Acc Init() const { return Acc(1); }
  __device__ Acc Load(In v, int64_t, int64_t) const { return static_cast<Acc>(v); }
  __device__ Acc Combine(Acc a, Acc b) const { return a * b; }
  __device__ Out Finalize(Acc a, int64_t) const { return Out(a); }
};

// any / all of x != 0 in x's own dtype (NaN counts as true, as bool(NaN) on the CPU).
template <typename InT, bool kAny>
struct LogicalReducer {
  using In = InT;
  using Out = bool;
  using Acc = bool;
  __device__ Acc Init() const { return !kAny; }
  __device__ Acc Load(In v, int64_t, int64_t) const {
    if constexpr (std::is_same_v<In, bool>) {
      return v;
    } else {
      return static_cast<Compute<In>>(v) != Compute<In>(0);
    }
  }
  __device__ Acc Combine(Acc a, Acc b) const { return kAny ? (a || b) : (a && b); }
  __device__ Out Finalize(Acc a, int64_t) const { return a; }
};

// logsumexp's second pass: sum of exp(x - m) where the row's max m is finite, then
// m + log(sum) (m itself where it is not finite).
template <typename InT>
struct LogSumExpReducer {
  using In = InT;
  using Out = InT;
  using Acc = Compute<In>;
  const Acc* max = nullptr;  // per output
  __device__ Acc Init() const { return Acc(0); }
  __device__ Acc Load(In v, int64_t, int64_t o) const {
    const Acc m = max[o];
    return IsFinite(m) ? Exp(static_cast<Acc>(v) - m) : Acc(0);
  }
  __device__ Acc Combine(Acc a, Acc b) const { return a + b; }
  __device__ Out Finalize(Acc a, int64_t o) const {
    const Acc m = max[o];
    return Out(IsFinite(m) ? m + Log(a) : m);
  }
};

// argmax: the first index of the largest value, NaN skipped, except that a NaN at index 0
// wins (the CPU's scan starts from it and nothing compares greater).
template <typename K>
struct ArgAcc {
  K value;
  int64_t index;
  int32_t kind;  // 0: nothing yet (or a NaN), 1: a value, 2: a NaN at index 0
  int32_t unused;
};
template <typename In>
using ArgKey = std::conditional_t<std::is_same_v<In, double>, double,
                                  std::conditional_t<std::is_same_v<In, int64_t> ||
                                                         std::is_same_v<In, bool>,
                                                     int64_t, float>>;
template <typename InT>
struct ArgmaxReducer {
  using In = InT;
  using Out = int64_t;
  using K = ArgKey<In>;
  using Acc = ArgAcc<K>;
  __device__ Acc Init() const { return {K(0), 0, 0, 0}; }
  __device__ Acc Load(In v, int64_t a, int64_t) const {
    const K k = static_cast<K>(v);
    if (IsNan(k)) return {k, a, a == 0 ? 2 : 0, 0};
    return {k, a, 1, 0};
  }
  __device__ Acc Combine(Acc p, Acc q) const {
    if (p.kind == 2) return p;
    if (q.kind == 2) return q;
    if (q.kind == 0) return p;
    if (p.kind == 0) return q;
    if (q.value > p.value || (q.value == p.value && q.index < p.index)) return q;
    return p;
  }
  __device__ Out Finalize(Acc a, int64_t) const { return a.kind == 1 ? a.index : 0; }
};

template <typename R>
struct CombineWith {
  R r;
  __device__ typename R::Acc operator()(typename R::Acc a, typename R::Acc b) const {
    return r.Combine(a, b);
  }
};

// ---- Kernels ------------------------------------------------------------------------------

constexpr unsigned kBlock = 256;

// One warp per row of [outer, len] (inner == 1).
template <typename R>
__global__ void ReduceRowsWarp(const typename R::In* x, int64_t outer, int64_t len, R r,
                               typename R::Out* out) {
  const RowGroup<true> g = MakeRowGroup<true>();
  for (int64_t o = g.first_row; o < outer; o += g.row_step) {
    const typename R::In* row = x + o * len;
    typename R::Acc acc = r.Init();
    for (int64_t a = g.lane; a < len; a += 32) acc = r.Combine(acc, r.Load(row[a], a, o));
    acc = WarpReduce(acc, CombineWith<R>{r});
    if (g.lane == 0) out[o] = r.Finalize(acc, o);
  }
}

// One block per (row, piece) of [outer, len]; with splits > 1 the pieces' partial values go
// to partial[o * splits + s].
template <typename R>
__global__ void ReduceRowsBlock(const typename R::In* x, int64_t outer, int64_t len,
                                int64_t splits, int64_t chunk, R r, typename R::Out* out,
                                typename R::Acc* partial) {
  const int64_t pieces = outer * splits;
  for (int64_t b = blockIdx.x; b < pieces; b += gridDim.x) {
    const int64_t o = b / splits;
    const int64_t s = b - o * splits;
    const int64_t begin = s * chunk;
    const int64_t end = begin + chunk < len ? begin + chunk : len;
    const typename R::In* row = x + o * len;
    typename R::Acc acc = r.Init();
    for (int64_t a = begin + threadIdx.x; a < end; a += blockDim.x) {
      acc = r.Combine(acc, r.Load(row[a], a, o));
    }
    acc = BlockAllReduce(acc, CombineWith<R>{r}, r.Init());
    if (threadIdx.x == 0) {
      if (splits == 1) {
        out[o] = r.Finalize(acc, o);
      } else {
        partial[b] = acc;
      }
    }
  }
}

// One thread per (o, piece, i) of [outer, len, inner], folding its piece in order; with
// splits > 1 into partial[(o * splits + s) * inner + i].
template <typename R>
__global__ void ReduceColumns(const typename R::In* x, int64_t outer, int64_t len,
                              int64_t inner, int64_t splits, int64_t chunk, R r,
                              typename R::Out* out, typename R::Acc* partial) {
  const int64_t total = outer * splits * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    const int64_t i = t % inner;
    const int64_t q = t / inner;
    const int64_t s = q % splits;
    const int64_t o = q / splits;
    const int64_t begin = s * chunk;
    const int64_t end = begin + chunk < len ? begin + chunk : len;
    const typename R::In* column = x + o * len * inner + i;
    const int64_t at = o * inner + i;
    typename R::Acc acc = r.Init();
    for (int64_t a = begin; a < end; ++a) acc = r.Combine(acc, r.Load(column[a * inner], a, at));
    if (splits == 1) {
      out[at] = r.Finalize(acc, at);
    } else {
      partial[t] = acc;
    }
  }
}

// out[o, i] = Finalize of the pieces partial[o, 0..splits, i], folded in piece order.
template <typename R>
__global__ void CombinePieces(const typename R::Acc* partial, int64_t outer, int64_t splits,
                              int64_t inner, R r, typename R::Out* out) {
  const int64_t total = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    const int64_t o = t / inner;
    const int64_t i = t - o * inner;
    typename R::Acc acc = r.Init();
    for (int64_t s = 0; s < splits; ++s) acc = r.Combine(acc, partial[(o * splits + s) * inner + i]);
    out[t] = r.Finalize(acc, t);
  }
}

// Folds x (laid out as `layout`, already permuted) into out[outer * inner] on `stream`;
// scratch memory from `like`'s allocator.
template <typename R>
void LaunchReduce(const typename R::In* x, const ReduceLayout& layout, const R& r,
                  typename R::Out* out, const Tensor& like, cudaStream_t stream) {
  const int64_t outputs = layout.outer * layout.inner;
  if (outputs == 0) return;
  const ReduceLaunch launch = PlanReduceLaunch(layout);
  using Acc = typename R::Acc;
  Tensor scratch;
  Acc* partial = nullptr;
  if (launch.splits > 1) {
    scratch = Scratch(like, outputs * launch.splits * static_cast<int64_t>(sizeof(Acc)));
    partial = reinterpret_cast<Acc*>(scratch.bytes());
  }
  if (launch.rows && launch.warp_rows) {
    const int64_t warps = kBlock / 32;
    ReduceRowsWarp<R><<<GridFor((layout.outer + warps - 1) / warps, 1), kBlock, 0, stream>>>(
        x, layout.outer, layout.len, r, out);
  } else if (launch.rows) {
    ReduceRowsBlock<R><<<GridFor(layout.outer * launch.splits, 1), kBlock, 0, stream>>>(
        x, layout.outer, layout.len, launch.splits, launch.chunk, r, out, partial);
  } else {
    ReduceColumns<R><<<GridFor(outputs * launch.splits, kBlock), kBlock, 0, stream>>>(
        x, layout.outer, layout.len, layout.inner, launch.splits, launch.chunk, r, out, partial);
  }
  SPMD_CUDA_CHECK_LAUNCH();
  if (launch.splits > 1) {
    CombinePieces<R><<<GridFor(outputs, kBlock), kBlock, 0, stream>>>(
        partial, layout.outer, launch.splits, layout.inner, r, out);
    SPMD_CUDA_CHECK_LAUNCH();
  }
}

// ---- Ops ------------------------------------------------------------------------------------

// x (any dtype) laid out for the reduction of `reduced`: the values x holds (converted to
// float64 when `to_float` and x is int64 or bool), permuted when the layout asks.
struct Arranged {
  const Tensor* x = nullptr;
  ReduceLayout layout;
};
Arranged Arrange(const Tensor& x0, const std::vector<bool>& reduced, bool to_float,
                 Temporaries& temps) {
  Arranged a;
  a.x = &x0;
  if (to_float && !IsFloating(x0.dtype())) a.x = &temps.As(x0, DType::kFloat64);
  a.layout = ArrangeReduce(a.x->shape(), reduced);
  if (!a.layout.perm.empty()) a.x = &temps.Adopt(PermuteOnDevice(*a.x, a.layout.perm));
  return a;
}

// A float reduction of x into a new tensor of `out_shape` in x's floating dtype (float64
// for an int64 or bool x), on x's stream: body(In{}, x data, layout, out data, stream).
template <typename Body>
Tensor ReduceFloat(const Tensor& x0, const std::vector<bool>& reduced, const Shape& out_shape,
                   Body body) {
  const cudaStream_t stream = ToCuda(x0.stream());
  Temporaries temps(stream);
  const Arranged a = Arrange(x0, reduced, /*to_float=*/true, temps);
  Tensor out = NewChecked(x0, out_shape, a.x->dtype());
  DispatchFloating(a.x->dtype(), InputField(0, "dtype"), /*half=*/true, [&](auto zero) {
    using In = decltype(zero);
    body(zero, DataOf<In>(*a.x), a.layout, DataOf<In>(out), stream);
  });
  return out;
}

// A sum-like reduction: the sum of pre(x) over the plan, then post.
Tensor SumLike(const Tensor& x, const std::vector<bool>& reduced, const Shape& out_shape, Pre pre,
               Post post, double p, double post_value) {
  return ReduceFloat(x, reduced, out_shape,
                     [&](auto zero, const auto* data, const ReduceLayout& layout, auto* out,
                         cudaStream_t stream) {
                       using In = decltype(zero);
                       using T = Compute<In>;
                       SumReducer<In, In> r;
                       r.pre = pre;
                       r.post = post;
                       r.p = static_cast<T>(p);
                       r.post_value = static_cast<T>(post_value);
                       LaunchReduce(data, layout, r, out, x, stream);
                     });
}

// A sum over sum's attrs (axis, keep_dim, reduce_all) of pre(x), post applied to each sum:
// sum itself and frobenius_norm (squares, then the root).
Tensors SumOverAxes(const TensorArgs& inputs, const Attrs& attrs, Pre pre, Post post) {
  CheckTwoByteMix(inputs);
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  CallContext ctx(inputs);
  return TensorList(SumLike(inputs[0], plan.reduced, plan.out_shape, pre, post, 1, 1));
}

Tensors Sum(const TensorArgs& inputs, const Attrs& attrs) {
  return SumOverAxes(inputs, attrs, Pre::kIdentity, Post::kNone);
}

Tensors Mean(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::MeanPlan mean = plan::PlanMean(plan::ShapesOf(inputs), attrs);
  const ReduceShape& plan = mean.reduce;
  const int64_t divisor = mean.divisor;
  CallContext ctx(inputs);
  return TensorList(SumLike(inputs[0], plan.reduced, plan.out_shape, Pre::kIdentity,
                            Post::kDivide, 1, static_cast<double>(divisor)));
}

template <bool kMax>
Tensors Extremum(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  CallContext ctx(inputs);
  return TensorList(ReduceFloat(
      inputs[0], plan.reduced, plan.out_shape,
      [&](auto zero, const auto* data, const ReduceLayout& layout, auto* out, cudaStream_t s) {
        using In = decltype(zero);
        LaunchReduce(data, layout, ExtremumReducer<In, In, kMax>{}, out, inputs[0], s);
      }));
}

Tensors Prod(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  CallContext ctx(inputs);
  return TensorList(ReduceFloat(
      inputs[0], plan.reduced, plan.out_shape,
      [&](auto zero, const auto* data, const ReduceLayout& layout, auto* out, cudaStream_t s) {
        using In = decltype(zero);
        LaunchReduce(data, layout, ProdReducer<In>{}, out, inputs[0], s);
      }));
}

template <bool kAny>
Tensors Logical(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Arranged a = Arrange(inputs[0], plan.reduced, /*to_float=*/false, temps);
  Tensor out = NewChecked(inputs[0], plan.out_shape, DType::kBool);
  DispatchAny(a.x->dtype(), InputField(0, "dtype"), [&](auto zero) {
    using In = decltype(zero);
    LaunchReduce(DataOf<In>(*a.x), a.layout, LogicalReducer<In, kAny>{}, DataOf<bool>(out),
                 inputs[0], ctx.stream);
  });
  return TensorList(std::move(out));
}

Tensors SquaredL2Norm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const ReduceShape plan = plan::PlanSquaredL2Norm(plan::ShapesOf(inputs), attrs);
  CallContext ctx(inputs);
  return TensorList(
      SumLike(inputs[0], plan.reduced, plan.out_shape, Pre::kSquare, Post::kNone, 1, 1));
}

Tensors MeanAll(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::MeanPlan mean = plan::PlanMeanAll(plan::ShapesOf(inputs), attrs);
  const ReduceShape& plan = mean.reduce;
  const int64_t divisor = mean.divisor;
  const Tensor& x = inputs[0];
  CallContext ctx(inputs);
  return TensorList(SumLike(x, plan.reduced, plan.out_shape, Pre::kIdentity, Post::kDivide, 1,
                            static_cast<double>(divisor)));
}

Tensors LogSumExp(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keepdim");
  CallContext ctx(inputs);
  const Tensor& x = inputs[0];
  return TensorList(ReduceFloat(
      x, plan.reduced, plan.out_shape,
      [&](auto zero, const auto* data, const ReduceLayout& layout, auto* out, cudaStream_t s) {
        using In = decltype(zero);
        using T = Compute<In>;
        // The max in the compute type (a 2-byte output would round it), then the sum.
        Tensor max = Scratch(x, layout.outer * layout.inner * static_cast<int64_t>(sizeof(T)));
        T* m = reinterpret_cast<T*>(max.bytes());
        LaunchReduce(data, layout, ExtremumReducer<In, T, true>{}, m, x, s);
        LogSumExpReducer<In> r;
        r.max = m;
        LaunchReduce(data, layout, r, out, x, s);
      }));
}

Tensors PNorm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::PNormPlan p = plan::PlanPNorm(plan::ShapesOf(inputs), attrs);
  const ReduceShape& plan = p.reduce;
  const double porder = p.porder;
  const Tensor& x = inputs[0];
  CallContext ctx(inputs);
  if (porder == 2.0) {
    return TensorList(SumLike(x, plan.reduced, plan.out_shape, Pre::kSquare, Post::kSqrt, 1, 1));
  }
  if (porder == 1.0) {
    return TensorList(SumLike(x, plan.reduced, plan.out_shape, Pre::kAbs, Post::kNone, 1, 1));
  }
  return TensorList(
      SumLike(x, plan.reduced, plan.out_shape, Pre::kPow, Post::kPow, porder, 1.0 / porder));
}

Tensors FrobeniusNorm(const TensorArgs& inputs, const Attrs& attrs) {
  return SumOverAxes(inputs, attrs, Pre::kSquare, Post::kSqrt);
}

Tensors Argmax(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::ArgmaxPlan p = plan::PlanArgmax(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  const Shape& out_shape = p.out_shape;
  cpu::internal::AxisView view;
  if (p.flatten) {
    view.len = x.numel();
  } else if (p.axis >= 0) {
    view = cpu::internal::ViewAlong(x.shape(), p.axis);
  }
  CallContext ctx(inputs);
  Tensor out = NewChecked(x, out_shape, DType::kInt64);
  const ReduceLayout layout{view.outer, view.len, view.inner, {}};
  DispatchAny(x.dtype(), InputField(0, "dtype"), [&](auto zero) {
    using In = decltype(zero);
    LaunchReduce(DataOf<In>(x), layout, ArgmaxReducer<In>{}, DataOf<int64_t>(out), x,
                 ctx.stream);
  });
  return TensorList(std::move(out));
}

// ---- cumsum ---------------------------------------------------------------------------------

// Rows of [rows, len] (inner == 1): one block per row, the row scanned in tiles of kBlock
// with cub::BlockScan and a running carry.
template <typename In>
__global__ void CumsumRows(const In* x, In* out, int64_t rows, int64_t len, bool exclusive,
                           bool reverse) {
  using T = Compute<In>;
  using Scan = cub::BlockScan<T, kBlock>;
  __shared__ typename Scan::TempStorage storage;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const In* src = x + r * len;
    In* dst = out + r * len;
    T carry = T(0);
    for (int64_t base = 0; base < len; base += kBlock) {
      const int64_t step = base + threadIdx.x;
      const int64_t a = reverse ? len - 1 - step : step;
      const T v = step < len ? static_cast<T>(src[a]) : T(0);
      T scanned;
      T total;
      if (exclusive) {
        Scan(storage).ExclusiveSum(v, scanned, total);
      } else {
        Scan(storage).InclusiveSum(v, scanned, total);
      }
      if (step < len) dst[a] = In(carry + scanned);
      carry += total;
      __syncthreads();  // `storage` is reused by the next tile
    }
  }
}

// One thread per (o, i) of [outer, len, inner], a running sum along len.
template <typename In>
__global__ void CumsumColumns(const In* x, In* out, int64_t outer, int64_t len, int64_t inner,
                              bool exclusive, bool reverse) {
  using T = Compute<In>;
  const int64_t total = outer * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    const int64_t o = t / inner;
    const int64_t i = t - o * inner;
    const int64_t base = o * len * inner + i;
    T running = T(0);
    for (int64_t step = 0; step < len; ++step) {
      const int64_t at = base + (reverse ? len - 1 - step : step) * inner;
      const T v = static_cast<T>(x[at]);
      if (exclusive) {
        out[at] = In(running);
        running += v;
      } else {
        running += v;
        out[at] = In(running);
      }
    }
  }
}

Tensors Cumsum(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::CumsumPlan c = plan::PlanCumsum(plan::ShapesOf(inputs), attrs);
  const Tensor& x0 = inputs[0];
  cpu::internal::AxisView view;
  if (c.flatten) {
    view.len = x0.numel();
  } else if (c.axis >= 0) {
    view = cpu::internal::ViewAlong(x0.shape(), c.axis);
  }
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = IsFloating(x0.dtype()) ? x0 : temps.As(x0, DType::kFloat64);
  Tensor out = NewChecked(x0, c.out_shape, x.dtype());
  if (out.numel() == 0) return TensorList(std::move(out));
  DispatchFloating(x.dtype(), InputField(0, "dtype"), /*half=*/true, [&](auto zero) {
    using In = decltype(zero);
    if (view.inner == 1 && view.len > 64) {
      CumsumRows<In><<<GridFor(view.outer, 1), kBlock, 0, ctx.stream>>>(
          DataOf<In>(x), DataOf<In>(out), view.outer, view.len, c.exclusive, c.reverse);
    } else {
      CumsumColumns<In><<<GridFor(view.outer * view.inner, kBlock), kBlock, 0, ctx.stream>>>(
          DataOf<In>(x), DataOf<In>(out), view.outer, view.len, view.inner, c.exclusive, c.reverse);
    }
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}

}  // namespace

Tensor SumOnDevice(const Tensor& x, const std::vector<bool>& reduced, bool keep_dim) {
  Shape out_shape;
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (!reduced[d]) {
      out_shape.push_back(x.shape()[d]);
    } else if (keep_dim) {
      out_shape.push_back(1);
    }
  }
  return SumLike(x, reduced, out_shape, Pre::kIdentity, Post::kNone, 1, 1);
}

// The reduction ops' CUDA kernels, by op name (kernels/cuda/registry.h).
// Every reduction reads bfloat16 / float16 itself (float32 arithmetic, one rounding).
const CudaKernel ops::sum{&Sum, HalfInputs::kNative};
const CudaKernel ops::mean{&Mean, HalfInputs::kNative};
const CudaKernel ops::max{&Extremum<true>, HalfInputs::kNative};
const CudaKernel ops::min{&Extremum<false>, HalfInputs::kNative};
const CudaKernel ops::prod{&Prod, HalfInputs::kNative};
const CudaKernel ops::any{&Logical<true>, HalfInputs::kNative};
const CudaKernel ops::all{&Logical<false>, HalfInputs::kNative};
const CudaKernel ops::squared_l2_norm{&SquaredL2Norm, HalfInputs::kNative};
const CudaKernel ops::mean_all{&MeanAll, HalfInputs::kNative};
const CudaKernel ops::logsumexp{&LogSumExp, HalfInputs::kNative};
const CudaKernel ops::p_norm{&PNorm, HalfInputs::kNative};
const CudaKernel ops::frobenius_norm{&FrobeniusNorm, HalfInputs::kNative};
const CudaKernel ops::argmax{&Argmax, HalfInputs::kNative};
const CudaKernel ops::cumsum{&Cumsum, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
