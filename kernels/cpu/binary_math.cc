// CPU kernels of the binary math family (rules/engine/binary_math_list.h), generated from the
// list: each runs its functor of kernels/binary_math.h through the elementwise ops'
// broadcasting map (kernels/cpu/elementwise_map.h). Arithmetic and bool-valued ops compute
// in the compute dtype of x and y (float32 or float64; int64 and bool values converted, as
// every elementwise kernel); the bitwise ops in int64 or bool (rules/ops/binary_math_dtypes.h).
#include <cstdint>
#include <utility>

#include "kernels/binary_math.h"
#include "kernels/cpu/elementwise_map.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "rules/ops/binary_math_dtypes.h"
#include "rules/engine/binary_math_list.h"

namespace spmd::kernels::cpu {
namespace {

template <template <class> class F>
Tensors RunBinaryMath(const char* op, const TensorArgs& inputs) {
  internal::CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  if constexpr (F<int64_t>::kKind == binary_math::Kind::kBitwise) {
    if (spmd::binary_math::BitwiseDType(op, x.dtype(), y.dtype()) == DType::kBool) {
      return TensorList(internal::BinaryMap<bool, bool>(x, y, F<bool>{}));
    }
    return TensorList(internal::BinaryMap<int64_t, int64_t>(x, y, F<int64_t>{}));
  } else {
    return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1}), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return TensorList(internal::BinaryMap<T, typename F<T>::Out>(x, y, F<T>{}));
    });
  }
}

}  // namespace

#define SPMD_BINARY_MATH_CPU_KERNEL(name)                              \
  Tensors name(const TensorArgs& inputs, const Attrs&) {              \
    return RunBinaryMath<binary_math::name##_fn>(#name, inputs);      \
  }
SPMD_FOR_EACH_BINARY_MATH_OP(SPMD_BINARY_MATH_CPU_KERNEL)
#undef SPMD_BINARY_MATH_CPU_KERNEL

}  // namespace spmd::kernels::cpu
