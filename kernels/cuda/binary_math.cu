// CUDA kernels of the binary math family (rules/engine/binary_math_list.h), generated from the
// list: the CPU kernels' checks (kernels/cpu/internal.h, rules/ops/binary_math_dtypes.h, in
// their order), then the elementwise map engine (kernels/cuda/elementwise_map.cuh, the one
// the elementwise ops use: broadcasting, vector loads) over the op's functor
// (kernels/binary_math.h, the expression the CPU computes). Arithmetic and bool-valued ops
// in the compute dtype (float32 or float64, int64 and bool values converted where they are
// read); the bitwise ops in int64, or bool for two bool inputs. 2-byte floats reach them
// widened to float32 by RunCudaKernel. Compiled with --fmad=false (CMakeLists.txt).
#include <cstdint>
#include <utility>

#include "kernels/binary_math.h"
#include "kernels/cuda/elementwise_map.cuh"
#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/binary_math_dtypes.h"
#include "rules/engine/binary_math_list.h"

namespace spmd::kernels::cuda {
namespace {

namespace em = elementwise_map;

// f over x and y in T (int64_t or bool), each read as its own element type.
template <class T, class F>
void BitwiseMap(Tensor& out, const Tensor& x, const Tensor& y, const F& f) {
  const std::vector<Shape> shapes = {x.shape(), y.shape()};
  const auto with = [](const Tensor& t, auto&& g) {
    if (t.dtype() == DType::kBool) {
      g(reinterpret_cast<const bool*>(t.bytes()));
    } else {
      g(reinterpret_cast<const int64_t*>(t.bytes()));
    }
  };
  with(x, [&](const auto* xp) { with(y, [&](const auto* yp) { em::Map<T, T>(out, f, shapes, xp, yp); }); });
}

template <template <class> class F>
Tensors RunBinaryMath(const char* op, const TensorArgs& inputs) {
  detail::CheckInputs(inputs, false);
  detail::ci::CheckArity(inputs, 2);
  if constexpr (F<int64_t>::kKind == binary_math::Kind::kBitwise) {
    const Tensor& x = inputs[0];
    const Tensor& y = inputs[1];
    const DType dtype = spmd::binary_math::BitwiseDType(op, x.dtype(), y.dtype());
    const Shape shape = detail::ci::BroadcastShapes({x.shape(), y.shape()});
    Tensor out = em::NewOut(x, shape, dtype);
    if (out.numel() == 0) return TensorList(std::move(out));
    if (dtype == DType::kBool) {
      BitwiseMap<bool>(out, x, y, F<bool>{});
    } else {
      BitwiseMap<int64_t>(out, x, y, F<int64_t>{});
    }
    return TensorList(std::move(out));
  } else {
    constexpr bool kBool = F<double>::kKind == binary_math::Kind::kBool;
    return em::BinaryOp<kBool>(inputs, [](auto c) { return F<decltype(c)>{}; });
  }
}

#define SPMD_BINARY_MATH_CUDA_KERNEL(name)                                       \
  Tensors Run_##name(const TensorArgs& inputs, const Attrs&) {                  \
    return RunBinaryMath<::spmd::kernels::binary_math::name##_fn>(#name, inputs); \
  }
SPMD_FOR_EACH_BINARY_MATH_OP(SPMD_BINARY_MATH_CUDA_KERNEL)
#undef SPMD_BINARY_MATH_CUDA_KERNEL

}  // namespace

// One definition per op of the list (op_completeness_test reads this macro and the list).
#define SPMD_BINARY_MATH_CUDA_DEFINITION(name) const CudaKernel ops::name{&Run_##name, HalfInputs::kWidened};
SPMD_FOR_EACH_BINARY_MATH_OP(SPMD_BINARY_MATH_CUDA_DEFINITION)
#undef SPMD_BINARY_MATH_CUDA_DEFINITION

}  // namespace spmd::kernels::cuda
