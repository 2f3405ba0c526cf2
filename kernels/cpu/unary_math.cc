// CPU kernels of the unary math family (rules/engine/unary_math_list.h), generated from the list:
// each runs its functor of kernels/unary_math.h over the elements in the compute dtype of
// x (float32 or float64; int64 and bool values converted, as every elementwise kernel).
#include <utility>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/unary_math.h"
#include "rules/ops/unary_math_attrs.h"
#include "rules/engine/unary_math_list.h"

namespace spmd::kernels::cpu {
namespace {

template <template <class> class F>
Tensors RunUnaryMath(const char* op, const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 1);
  spmd::unary_math::CheckAttrs(op, attrs);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const F<T> f = F<T>::Make(attrs);
    internal::ValuesAs<T> x(inputs[0]);
    Tensor out = internal::NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* p = x.data();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
    return TensorList(std::move(out));
  });
}

}  // namespace

#define SPMD_UNARY_MATH_CPU_KERNEL(name)                                 \
  Tensors name(const TensorArgs& inputs, const Attrs& attrs) {          \
    return RunUnaryMath<unary_math::name##_fn>(#name, inputs, attrs);   \
  }
SPMD_FOR_EACH_UNARY_MATH_OP(SPMD_UNARY_MATH_CPU_KERNEL)
#undef SPMD_UNARY_MATH_CPU_KERNEL

}  // namespace spmd::kernels::cpu
