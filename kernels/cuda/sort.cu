// CUDA kernels of the sort family (the ops of kernels/cpu/sort.cc): argsort, topk. Each
// line of x along the axis is sorted by CUB's stable segmented sort (one line: its radix
// sort) on keys that encode the CPU kernel's total order (index_map.h OrderKey*: numbers
// ascending with -0 equal to +0, NaN above every number; descending: the keys inverted),
// with the positions as values, so ties keep index order and the result is the CPU's
// exactly. topk takes the first k of the sorted line. Values are copied from x (a -0 stays
// -0); indices are int64. float32, float64, int64 and bool natively; 2-byte floats through
// RunCudaKernel's widening (float32 orders them as they are ordered).
#include <string>
#include <utility>

#include "kernels/cuda/cub_sort.cuh"
#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/sort_plan.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::CheckArity;

template <typename T>
struct KeyOf;
template <>
struct KeyOf<float> {
  using type = uint32_t;
  static __device__ uint32_t Make(float v) { return OrderKeyFloat(v); }
};
template <>
struct KeyOf<double> {
  using type = uint64_t;
  static __device__ uint64_t Make(double v) { return OrderKeyDouble(v); }
};
template <>
struct KeyOf<int64_t> {
  using type = uint64_t;
  static __device__ uint64_t Make(int64_t v) { return OrderKeyInt(v); }
};
template <>
struct KeyOf<bool> {
  using type = uint32_t;
  static __device__ uint32_t Make(bool v) { return v ? 1u : 0u; }
};

template <typename T>
__global__ void SortKeysKernel(SortView v, const T* x, typename KeyOf<T>::type* keys, int64_t* pos, int64_t n,
                               bool descending) {
  for (SPMD_GRID_STRIDE(q, n)) {
    int64_t a = 0;
    const int64_t src = SortInput(v, q, &a);
    const auto key = KeyOf<T>::Make(x[src]);
    keys[q] = descending ? ~key : key;
    pos[q] = a;
  }
}

template <typename T>
__global__ void SortOutputKernel(SortView v, const T* x, const int64_t* sorted_pos, T* out, int64_t* indices,
                                 int64_t n) {
  for (SPMD_GRID_STRIDE(e, n)) {
    const int64_t a = sorted_pos[SortOutputSlot(v, e)];
    out[e] = x[SortOutputSource(v, e, a)];
    indices[e] = a;
  }
}

Tensors SortAlong(const Tensor& x, int64_t axis, int64_t k, bool descending) {
  const detail::ci::AxisView av = detail::ci::ViewAlong(x.shape(), axis);
  Shape out_shape = x.shape();
  if (!out_shape.empty()) out_shape[axis] = k;
  Tensor out = detail::NewOut(x, out_shape, x.dtype());
  Tensor indices = detail::NewOut(x, out_shape, DType::kInt64);
  if (out.numel() == 0) return TensorList(std::move(out), std::move(indices));
  SortView v;
  v.outer = av.outer;
  v.len = av.len;
  v.inner = av.inner;
  v.k = k;
  const int64_t lines = v.outer * v.inner;
  const int64_t n = lines * v.len;
  const cudaStream_t stream = detail::StreamOf(x);
  const auto run = [&](auto zero) {
    using T = decltype(zero);
    using Key = typename KeyOf<T>::type;
    const DType key_dtype = sizeof(Key) == 8 ? DType::kInt64 : DType::kFloat32;  // storage only
    Tensor keys = detail::NewOut(x, Shape{n}, key_dtype), sorted_keys = detail::NewOut(x, Shape{n}, key_dtype);
    Tensor pos = detail::Int64Buffer(x, n), sorted_pos = detail::Int64Buffer(x, n);
    const LaunchConfig in_cfg = GridStride(n);
    SortKeysKernel<T><<<in_cfg.grid, in_cfg.block, 0, stream>>>(
        v, reinterpret_cast<const T*>(x.bytes()), reinterpret_cast<Key*>(keys.bytes()),
        reinterpret_cast<int64_t*>(pos.bytes()), n, descending);
    SPMD_CUDA_CHECK_LAUNCH();
    detail::StableSortSegments<Key>(x, reinterpret_cast<const Key*>(keys.bytes()),
                                    reinterpret_cast<Key*>(sorted_keys.bytes()),
                                    reinterpret_cast<const int64_t*>(pos.bytes()),
                                    reinterpret_cast<int64_t*>(sorted_pos.bytes()), lines, v.len);
    const int64_t m = out.numel();
    const LaunchConfig out_cfg = GridStride(m);
    SortOutputKernel<T><<<out_cfg.grid, out_cfg.block, 0, stream>>>(
        v, reinterpret_cast<const T*>(x.bytes()), reinterpret_cast<const int64_t*>(sorted_pos.bytes()),
        reinterpret_cast<T*>(out.bytes()), reinterpret_cast<int64_t*>(indices.bytes()), m);
    SPMD_CUDA_CHECK_LAUNCH();
  };
  switch (x.dtype()) {
    case DType::kFloat32: run(float{}); break;
    case DType::kFloat64: run(double{}); break;
    case DType::kInt64: run(int64_t{}); break;
    case DType::kBool: run(bool{}); break;
    default:
      ThrowUnsupported("inputs[0].dtype", "2-byte floats reach the sort widened to float32");
  }
  return TensorList(std::move(out), std::move(indices));
}

Tensors Argsort(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 1);
  const sort_plan::SortPlan plan = sort_plan::PlanArgsort(inputs[0].shape(), attrs);
  return SortAlong(inputs[0], plan.axis, plan.k, plan.descending);
}

Tensors Topk(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 1);
  const sort_plan::SortPlan plan = sort_plan::PlanTopk(inputs[0].shape(), attrs);
  return SortAlong(inputs[0], plan.axis, plan.k, plan.descending);
}

}  // namespace

// The sort ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::argsort{&Argsort, HalfInputs::kWidened};
const CudaKernel ops::topk{&Topk, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
