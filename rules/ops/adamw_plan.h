// adamw's attrs and shapes, shared by its rule, reference and kernels: one AdamW step
// (decoupled weight decay, bias correction by the step count), PyTorch's definition as
// train::AdamW states it. Header-only.
//
//   m' = beta1 m + (1 - beta1) g
//   v' = beta2 v + (1 - beta2) g^2
//   p' = p (1 - lr weight_decay) - (lr / c1) m' / (sqrt(v' / c2) + epsilon)
//   with c1 = 1 - beta1^step, c2 = 1 - beta2^step.
//
// The plan's constants are computed here once, in double, exactly as train::AdamW did
// with one op per term, so that the fused op's float64 results equal the chain's.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::optim {

struct AdamWPlan {
  double beta1 = 0, beta2 = 0, epsilon = 0;
  double one_minus_beta1 = 0, one_minus_beta2 = 0;
  double inv_correction2 = 0;  // 1 / (1 - beta2^step)
  double step_size = 0;        // lr / (1 - beta1^step)
  double decay = 0;            // 1 - lr weight_decay
};

namespace detail {

// attrs.NAME, finite and within [lo, hi) (hi_open) or [lo, hi].
inline double Bounded(const Attrs& attrs, const char* name, double lo, double hi, bool lo_open,
                      bool hi_open, const char* range) {
  const double x = attrs.GetFloat(name);
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  if (!ok) {
    ThrowInvalid(std::string("attrs.") + name, std::to_string(x) + " is not in " + range);
  }
  return x;
}

}  // namespace detail

// The attrs, validated (InvalidArgument naming attrs.lr, beta1, beta2, epsilon,
// weight_decay or step), and the four inputs (param, grad, moment1, moment2) of one shape
// (InvalidArgument "inputs[i].shape").
inline AdamWPlan PlanAdamW(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs) {
  if (shapes.size() != 4) {
    ThrowInvalid("inputs", "expected param, grad, moment1, moment2: 4 inputs, got " +
                               std::to_string(shapes.size()));
  }
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] != shapes[0]) {
      ThrowInvalid(shape::InputField(i, "shape"),
                   shape::ShapeString(shapes[i]) + " is not param's shape " + shape::ShapeString(shapes[0]));
    }
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double lr = detail::Bounded(attrs, "lr", 0, kInf, false, false, "[0, inf)");
  AdamWPlan p;
  p.beta1 = detail::Bounded(attrs, "beta1", 0, 1, false, true, "[0, 1)");
  p.beta2 = detail::Bounded(attrs, "beta2", 0, 1, false, true, "[0, 1)");
  p.epsilon = detail::Bounded(attrs, "epsilon", 0, kInf, true, false, "(0, inf)");
  const double weight_decay = detail::Bounded(attrs, "weight_decay", 0, kInf, false, false, "[0, inf)");
  const int64_t step = attrs.GetInt("step");
  if (step < 1) ThrowInvalid("attrs.step", "step " + std::to_string(step) + " must be at least 1");
  const double correction1 = 1 - std::pow(p.beta1, static_cast<double>(step));
  const double correction2 = 1 - std::pow(p.beta2, static_cast<double>(step));
  p.one_minus_beta1 = 1 - p.beta1;
  p.one_minus_beta2 = 1 - p.beta2;
  p.inv_correction2 = 1 / correction2;
  p.step_size = lr / correction1;
  p.decay = 1 - lr * weight_decay;
  return p;
}

}  // namespace spmd::optim
