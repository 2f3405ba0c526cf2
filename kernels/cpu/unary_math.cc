// CPU kernels of the unary math family (rules/engine/unary_math_list.h), generated from the list:
// each runs its functor of kernels/unary_math.h over the elements in the compute dtype of
// x (float32 or float64; int64 and bool values converted, as every elementwise kernel);
// logical_not's out is bool, bitwise_not runs in x's int64 or bool
// (rules/ops/unary_math_attrs.h).
#include <cstdint>
#include <utility>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/unary_math.h"
#include "rules/ops/unary_math_attrs.h"
#include "rules/engine/unary_math_list.h"

namespace spmd::kernels::cpu {
namespace {

// out[i] = f(x[i]), x read in T, out of F<T>::Out.
template <class T, class F>
Tensors MapAs(const Tensor& input, const F& f) {
  internal::ValuesAs<T> x(input);
  using Out = typename F::Out;
  Tensor out = internal::NewOutput(input.shape(), DTypeOf<Out>::value);
  Out* o = out.data<Out>();
  const T* p = x.data();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
  return TensorList(std::move(out));
}

template <template <class> class F>
Tensors RunUnaryMath(const char* op, const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 1);
  spmd::unary_math::CheckAttrs(op, attrs);
  if constexpr (F<int64_t>::kKind == unary_math::Kind::kBitwise) {
    if (spmd::unary_math::BitwiseDType(op, inputs[0].dtype()) == DType::kBool) {
      return MapAs<bool>(inputs[0], F<bool>::Make(attrs));
    }
    return MapAs<int64_t>(inputs[0], F<int64_t>::Make(attrs));
  } else {
    return internal::DispatchFloat(internal::ComputeDType(inputs, {0}), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return MapAs<T>(inputs[0], F<T>::Make(attrs));
    });
  }
}

}  // namespace

#define SPMD_UNARY_MATH_CPU_KERNEL(name)                                 \
  Tensors name(const TensorArgs& inputs, const Attrs& attrs) {          \
    return RunUnaryMath<unary_math::name##_fn>(#name, inputs, attrs);   \
  }
SPMD_FOR_EACH_UNARY_MATH_OP(SPMD_UNARY_MATH_CPU_KERNEL)
#undef SPMD_UNARY_MATH_CPU_KERNEL

}  // namespace spmd::kernels::cpu
