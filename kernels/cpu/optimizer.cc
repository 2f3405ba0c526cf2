// Optimizer steps (docs/OPS.md "Optimizer steps"): adamw in one pass over the four
// inputs, in the compute dtype, each term in the order train::AdamW's chain of ops used
// (so float64 results equal the chain's). The plan and its validation are the
// reference's (rules/ops/adamw_plan.h).
#include <cmath>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/ops/adamw_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::NewOutput;
using internal::ValuesAs;

template <typename T>
void AdamWLoop(const optim::AdamWPlan& p, const T* param, const T* grad, const T* m, const T* v,
               T* param_out, T* m_out, T* v_out, int64_t n) {
  const T beta1 = static_cast<T>(p.beta1), beta2 = static_cast<T>(p.beta2);
  const T c_beta1 = static_cast<T>(p.one_minus_beta1), c_beta2 = static_cast<T>(p.one_minus_beta2);
  const T inv_c2 = static_cast<T>(p.inv_correction2), eps = static_cast<T>(p.epsilon);
  const T step_size = static_cast<T>(p.step_size), decay = static_cast<T>(p.decay);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    const T mi = beta1 * m[i] + c_beta1 * g;
    const T vi = beta2 * v[i] + c_beta2 * (g * g);
    const T denominator = std::sqrt(vi * inv_c2) + eps;
    param_out[i] = decay * param[i] - (mi / denominator) * step_size;
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

}  // namespace

Tensors adamw(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 4);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const optim::AdamWPlan p = optim::PlanAdamW(shapes, attrs);
  return internal::DispatchFloat(internal::ComputeDTypeAll(inputs), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> param(inputs[0]), grad(inputs[1]), m(inputs[2]), v(inputs[3]);
    Tensor param_out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor m_out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor v_out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    AdamWLoop<T>(p, param.data(), grad.data(), m.data(), v.data(), param_out.data<T>(), m_out.data<T>(),
                 v_out.data<T>(), param_out.numel());
    return TensorList(std::move(param_out), std::move(m_out), std::move(v_out));
  });
}

}  // namespace spmd::kernels::cpu
