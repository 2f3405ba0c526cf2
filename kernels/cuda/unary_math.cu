// CUDA kernels of the unary math family (rules/engine/unary_math_list.h), generated from the list:
// the CPU kernels' checks (kernels/cpu/internal.h, rules/ops/unary_math_attrs.h, in their
// order), then one grid-stride pass of the op's functor (kernels/unary_math.h, the same
// expression the CPU computes) in the compute dtype: float32 or float64, int64 and bool
// values converted as the CPU's ValuesAs does (LoadAs); logical_not's out is bool,
// bitwise_not runs in x's int64 or bool. 2-byte floats reach them widened to
// float32 by RunCudaKernel. Compiled with --fmad=false (CMakeLists.txt) so that a * x + b
// rounds twice, as on the CPU.
#include <cstdint>
#include <utility>

#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "kernels/unary_math.h"
#include "rules/ops/unary_math_attrs.h"
#include "rules/engine/unary_math_list.h"

namespace spmd::kernels::cuda {
namespace {

template <class T, class F>
__global__ void UnaryMathKernel(const void* x, DType xd, typename F::Out* out, int64_t n, F f) {
  for (SPMD_GRID_STRIDE(i, n)) out[i] = f(LoadAs<T>(x, xd, i));
}

template <template <class> class F>
Tensors RunUnaryMath(const char* op, const TensorArgs& inputs, const Attrs& attrs) {
  detail::CheckInputs(inputs, false);
  detail::ci::CheckArity(inputs, 1);
  spmd::unary_math::CheckAttrs(op, attrs);
  const Tensor& x = inputs[0];
  constexpr auto kKind = F<int64_t>::kKind;
  const DType dtype = kKind == unary_math::Kind::kBitwise ? spmd::unary_math::BitwiseDType(op, x.dtype())
                                                          : detail::ci::ComputeDType(inputs, {0});
  Tensor out = detail::NewOut(x, x.shape(), kKind == unary_math::Kind::kBool ? DType::kBool : dtype);
  const int64_t n = out.numel();
  const auto launch = [&](auto zero) {
    using T = decltype(zero);
    using Out = typename F<T>::Out;
    LaunchGridStride(UnaryMathKernel<T, F<T>>, n, detail::StreamOf(x), x.bytes(), x.dtype(),
                     reinterpret_cast<Out*>(out.bytes()), n, F<T>::Make(attrs));
  };
  if constexpr (kKind == unary_math::Kind::kBitwise) {
    if (dtype == DType::kBool) {
      launch(bool{});
    } else {
      launch(int64_t{});
    }
  } else if (dtype == DType::kFloat32) {
    launch(float{});
  } else {
    launch(double{});
  }
  return TensorList(std::move(out));
}

#define SPMD_UNARY_MATH_CUDA_KERNEL(name)                                          \
  Tensors Run_##name(const TensorArgs& inputs, const Attrs& attrs) {              \
    return RunUnaryMath<::spmd::kernels::unary_math::name##_fn>(#name, inputs, attrs); \
  }
SPMD_FOR_EACH_UNARY_MATH_OP(SPMD_UNARY_MATH_CUDA_KERNEL)
#undef SPMD_UNARY_MATH_CUDA_KERNEL

}  // namespace

// One definition per op of the list (op_completeness_test reads this macro and the list).
#define SPMD_UNARY_MATH_CUDA_DEFINITION(name) const CudaKernel ops::name{&Run_##name, HalfInputs::kWidened};
SPMD_FOR_EACH_UNARY_MATH_OP(SPMD_UNARY_MATH_CUDA_DEFINITION)
#undef SPMD_UNARY_MATH_CUDA_DEFINITION

}  // namespace spmd::kernels::cuda
