// The CUDA elementwise map engine, shared by the elementwise ops (kernels/cuda/elementwise.cu)
// and the binary math family (kernels/cuda/binary_math.cu): out[i] = f(inputs at i) in the
// compute type C, each input read as C (ValueAs: int64 and bool inputs converted where they
// are read; kernels/cuda/convert.h). Inputs of the output's shape take the contiguous path,
// 16-byte vector loads and stores where every pointer is aligned for them; broadcast inputs
// take a strided path over the CPU's collapsed broadcast plan (internal::PlanBroadcast),
// the output one more operand of the indexer. Include from .cu files only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/strided.h"

namespace spmd::kernels::cuda::elementwise_map {

namespace internal = ::spmd::kernels::cpu::internal;

// A computed value stored as the output's element type (2-byte floats round once).
template <class Out, class R>
__device__ __forceinline__ Out StoreAs(R r) {
  if constexpr (kIsTwoByte<Out>) {
    return Out(static_cast<float>(r));
  } else {
    return static_cast<Out>(r);
  }
}

// ---- the map kernels --------------------------------------------------------------------

template <class S, int N>
struct alignas(sizeof(S) * N) Pack {
  S v[N];
};

template <int N, class C, class Out, class F, class... S>
__device__ __forceinline__ void ComputePack(Pack<Out, N>& o, const F& f, const Pack<S, N>&... p) {
#pragma unroll
  for (int j = 0; j < N; ++j) o.v[j] = StoreAs<Out>(f(ValueAs<C>(p.v[j])...));
}

// Every input and the output contiguous, of n elements. (No __restrict__: add_n
// accumulates in place, out being one of the inputs.)
template <class C, class Out, class F, class... S>
__global__ void MapContiguous(Out* out, int64_t n, F f, const S*... in) {
  for (SPMD_GRID_STRIDE(i, n)) out[i] = StoreAs<Out>(f(ValueAs<C>(in[i])...));
}

// As MapContiguous, N elements per step through aligned vector loads and stores (every
// pointer aligned to N elements of its type); the n % N last elements one per thread.
template <int N, class C, class Out, class F, class... S>
__global__ void MapVector(Out* out, int64_t n, F f, const S*... in) {
  const int64_t packs = n / N;
  for (SPMD_GRID_STRIDE(v, packs)) {
    Pack<Out, N> o;
    ComputePack<N, C>(o, f, reinterpret_cast<const Pack<S, N>*>(in)[v]...);
    reinterpret_cast<Pack<Out, N>*>(out)[v] = o;
  }
  const int64_t i = packs * N + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = StoreAs<Out>(f(ValueAs<C>(in[i])...));
}

template <class C, class F, class... S, size_t... I>
__device__ __forceinline__ auto ApplyAt(const F& f, const int64_t* off, std::index_sequence<I...>,
                                        const S*... in) {
  return f(ValueAs<C>(in[off[I]])...);
}

// Broadcast: operand k < K - 1 is input k, operand K - 1 the output.
template <class C, class Out, class F, int K, class... S>
__global__ void MapStrided(Out* out, StridedIndexer<K> ix, int64_t n, F f, const S*... in) {
  for (SPMD_GRID_STRIDE(i, n)) {
    int64_t off[K];
    ix.Offsets(i, off);
    out[off[K - 1]] = StoreAs<Out>(ApplyAt<C>(f, off, std::index_sequence_for<S...>{}, in...));
  }
}

template <class T>
inline bool AlignedFor(const T* p, int n) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * static_cast<size_t>(n)) == 0;
}

template <class C, class Out, class F, class... S, size_t... I>
void LaunchBroadcast(Out* out, const StridedPlan& plan, const F& f, cudaStream_t stream,
                     std::index_sequence<I...>, const S*... in) {
  constexpr int K = sizeof...(S) + 1;
  const SplitPlan split = SplitOuter(plan);
  const StridedIndexer<K> ix = MakeIndexer<K>(split.inner);
  const int64_t n = split.inner.numel();
  for (const std::vector<int64_t>& start : OuterStarts(split.outer)) {
    LaunchGridStride(MapStrided<C, Out, F, K, S...>, n, stream, out + start[K - 1], ix, n, f,
                     (in + start[I])...);
  }
}

// out[i] = f(inputs broadcast to out's shape at i), on out's stream.
template <class C, class Out, class F, class... S>
void Map(Tensor& out, const F& f, const std::vector<Shape>& shapes, const S*... in) {
  const int64_t n = out.numel();
  if (n == 0) return;
  Out* o = reinterpret_cast<Out*>(out.bytes());
  cudaStream_t stream = ToCuda(out.stream());
  bool same = true;
  for (const Shape& s : shapes) same = same && s == out.shape();
  if (same) {
    constexpr size_t kWidest = std::max({sizeof(Out), sizeof(S)...});
    constexpr int N = static_cast<int>(16 / kWidest);
    if constexpr (N > 1) {
      if (AlignedFor(o, N) && (AlignedFor(in, N) && ...)) {
        const int64_t packs = n / N;
        LaunchGridStride(MapVector<N, C, Out, F, S...>, packs > 0 ? packs : 1, stream, o, n, f, in...);
        return;
      }
    }
    LaunchGridStride(MapContiguous<C, Out, F, S...>, n, stream, o, n, f, in...);
    return;
  }
  const StridedPlan plan = PlanBroadcastWalk(out.shape(), shapes);
  LaunchBroadcast<C, Out>(o, plan, f, stream, std::index_sequence_for<S...>{}, in...);
}

// ---- operands ---------------------------------------------------------------------------

// An input as the kernel reads it: its own buffer when it holds T (the output's element
// type), else a copy converted to C = Compute<T> (ValueAs: int64 / bool values, float32 for
// a 2-byte T's other inputs never happens: RunCudaKernel refuses the mix).
struct Operand {
  const void* ptr = nullptr;
  bool is_t = true;
  std::optional<Tensor> converted;
};

template <typename S, typename C>
__global__ void ValueConvertKernel(const S* x, C* y, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) y[i] = ValueAs<C>(x[i]);
}

// The conversion runs on `like`'s stream (inputs[0]'s: the kernel's) from its allocator.
template <class T>
Operand AsOperand(const Tensor& t, const Tensor& like) {
  using C = Compute<T>;
  Operand op;
  if (t.dtype() == DTypeOf<T>::value) {
    op.ptr = t.bytes();
    return op;
  }
  op.is_t = false;
  op.converted = NewOutput(like, t.shape(), DTypeOf<C>::value);
  const int64_t n = t.numel();
  DispatchAny(t.dtype(), "inputs[0].dtype", [&](auto s) {
    using S = decltype(s);
    LaunchGridStride(ValueConvertKernel<S, C>, n, ToCuda(like.stream()),
                     reinterpret_cast<const S*>(t.bytes()), reinterpret_cast<C*>(op.converted->bytes()), n);
  });
  op.ptr = op.converted->bytes();
  return op;
}

// Calls f(typed pointer) with the operand as T or as C.
template <class T, class F>
void WithOperand(const Operand& op, F&& f) {
  if (op.is_t) {
    f(static_cast<const T*>(op.ptr));
  } else {
    f(static_cast<const Compute<T>*>(op.ptr));
  }
}

inline Tensor NewOut(const Tensor& like, const Shape& shape, DType dtype) {
  internal::CheckOutputShape(shape);
  return NewOutput(like, shape, dtype);
}

// out = f(x, y) broadcast; the output in the compute dtype (Out = T) or bool.
template <bool kBool, class Make>
Tensors BinaryOp(const TensorArgs& inputs, Make make) {
  internal::CheckArity(inputs, 2);
  const DType dtype = internal::ComputeDType(inputs, {0, 1});
  const Shape shape = internal::BroadcastShapes({inputs[0].shape(), inputs[1].shape()});
  Tensor out = NewOut(inputs[0], shape, kBool ? DType::kBool : dtype);
  DispatchFloating(dtype, "inputs[0].dtype", true, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    using Out = std::conditional_t<kBool, bool, T>;
    const Operand x = AsOperand<T>(inputs[0], inputs[0]);
    const Operand y = AsOperand<T>(inputs[1], inputs[0]);
    const auto f = make(C{});
    WithOperand<T>(x, [&](auto* xp) {
      WithOperand<T>(y, [&](auto* yp) { Map<C, Out>(out, f, {inputs[0].shape(), inputs[1].shape()}, xp, yp); });
    });
  });
  return TensorList(std::move(out));
}

}  // namespace spmd::kernels::cuda::elementwise_map
