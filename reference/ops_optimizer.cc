// Optimizer steps (docs/OPS.md "Optimizer steps"): adamw, the formulas of
// rules/ops/adamw_plan.h in float64, one element at a time.
#include <cmath>
#include <utility>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/adamw_plan.h"

namespace spmd::reference::ops {

Tensors adamw(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 4);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  const optim::AdamWPlan p = optim::PlanAdamW(shapes, attrs);
  const Tensor& param = inputs[0];
  const Tensor& grad = inputs[1];
  const Tensor& m = inputs[2];
  const Tensor& v = inputs[3];
  Tensor param_out = internal::Zeros(param.shape);
  Tensor m_out = internal::Zeros(param.shape);
  Tensor v_out = internal::Zeros(param.shape);
  for (size_t i = 0; i < param.data.size(); ++i) {
    const double g = grad.data[i];
    const double mi = p.beta1 * m.data[i] + p.one_minus_beta1 * g;
    const double vi = p.beta2 * v.data[i] + p.one_minus_beta2 * (g * g);
    const double denominator = std::sqrt(vi * p.inv_correction2) + p.epsilon;
    param_out.data[i] = p.decay * param.data[i] - (mi / denominator) * p.step_size;
    m_out.data[i] = mi;
    v_out.data[i] = vi;
  }
  Tensors outs;
  outs.push_back(std::move(param_out));
  outs.push_back(std::move(m_out));
  outs.push_back(std::move(v_out));
  return outs;
}

}  // namespace spmd::reference::ops
