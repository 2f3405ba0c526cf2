// CUDA kernels of the extrema family (rules/ops/extrema.cc): amax and amin run max's and
// min's kernels (the same values). argmin is argmax of an order-reversing copy of x: -x
// for floats (a NaN stays a NaN, so argmax's rule for NaNs is argmin's), ~x for int64
// (-x - 1: no overflow at the smallest value), !x for bool; argmax keeps the first of ties,
// as the CPU's argmin scan. 2-byte floats reach argmin widened to float32 (exact, the same
// order) by RunCudaKernel.
#include <cstdint>
#include <utility>

#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::kernels::cuda {
namespace {

template <class T>
__device__ inline T Reversed(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return !v;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return ~v;
  } else {
    return -v;
  }
}

template <class T>
__global__ void ReverseOrderKernel(const T* x, T* out, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) out[i] = Reversed(x[i]);
}

Tensors Amax(const TensorArgs& inputs, const Attrs& attrs) { return ops::max.fn(inputs, attrs); }
Tensors Amin(const TensorArgs& inputs, const Attrs& attrs) { return ops::min.fn(inputs, attrs); }

Tensors Argmin(const TensorArgs& inputs, const Attrs& attrs) {
  detail::CheckInputs(inputs, false);
  (void)plan::PlanArgmax(plan::ShapesOf(inputs), attrs);  // the CPU kernel's checks, first
  const Tensor& x = inputs[0];
  Tensor reversed = detail::NewOut(x, x.shape(), x.dtype());
  const int64_t n = x.numel();
  const auto launch = [&](auto zero) {
    using T = decltype(zero);
    LaunchGridStride(ReverseOrderKernel<T>, n, detail::StreamOf(x), reinterpret_cast<const T*>(x.bytes()),
                     reinterpret_cast<T*>(reversed.bytes()), n);
  };
  switch (x.dtype()) {
    case DType::kFloat32: launch(float{}); break;
    case DType::kFloat64: launch(double{}); break;
    case DType::kInt64: launch(int64_t{}); break;
    case DType::kBool: launch(bool{}); break;
    default: ThrowInvalid("inputs[0].dtype", "argmin: a 2-byte float reaches the kernel widened to float32");
  }
  const Tensor* args[] = {&reversed};
  return ops::argmax.fn(TensorArgs(std::vector<const Tensor*>(args, args + 1)), attrs);
}

}  // namespace

const CudaKernel ops::amax{&Amax, HalfInputs::kNative};
const CudaKernel ops::amin{&Amin, HalfInputs::kNative};
const CudaKernel ops::argmin{&Argmin, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
