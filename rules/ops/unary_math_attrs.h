// The unary math family's attrs (rules/engine/unary_math_list.h), validated once for the rule,
// the reference and the kernels (header-only, as rules/ops/dropout_attrs.h: validation only,
// no value arithmetic, so all three refuse the same requests naming the same field while
// the values stay computed independently).
#pragma once

#include <cmath>
#include <string>
#include <string_view>

#include "rules/model/attrs.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"

namespace spmd::unary_math {

// Throws SpmdError naming the field: a float attr that is not finite (InvalidArgument
// "attrs.NAME"); celu's alpha 0 (a division by it); softshrink's threshold below 0;
// hardtanh's t_min above t_max; logit's eps outside [0, 0.5); round's decimals other than
// 0 (Unsupported: rounding x * 10^d in float32 and float64 gives different ties).
inline void CheckAttrs(std::string_view op, const Attrs& attrs) {
  for (const auto& [name, value] : attrs.values()) {
    if (const double* v = std::get_if<double>(&value); v != nullptr && !std::isfinite(*v)) {
      ThrowInvalid("attrs." + name, std::string(op) + "'s " + name + " must be finite");
    }
  }
  if (op == "celu" && attrs.GetFloat("alpha") == 0.0) {
    ThrowInvalid("attrs.alpha", "celu's alpha must not be 0 (x / alpha)");
  }
  if (op == "softshrink" && attrs.GetFloat("threshold") < 0.0) {
    ThrowInvalid("attrs.threshold", "softshrink's threshold must be >= 0");
  }
  if (op == "hardtanh" && attrs.GetFloat("t_min") > attrs.GetFloat("t_max")) {
    ThrowInvalid("attrs.t_min", "hardtanh's t_min is greater than t_max");
  }
  if (op == "logit") {
    const double eps = attrs.GetFloat("eps");
    if (!(eps >= 0.0 && eps < 0.5)) ThrowInvalid("attrs.eps", "logit's eps must be in [0, 0.5)");
  }
  if (op == "round" && attrs.GetInt("decimals") != 0) {
    ThrowUnsupported("attrs.decimals", "round supports decimals = 0 only");
  }
}

// The family's dtypes: bitwise_not takes int64 or bool only and keeps it (InvalidArgument
// "inputs[0].dtype" otherwise); logical_not takes any dtype and gives bool; every other
// op gives the compute dtype (float32 or float64; int64 and bool values converted).
inline bool IsBitwise(std::string_view op) { return op == "bitwise_not"; }
inline DType BitwiseDType(std::string_view op, DType x) {
  if (x != DType::kInt64 && x != DType::kBool) {
    ThrowInvalid("inputs[0].dtype", std::string(op) + " takes int64 or bool, not " + std::string(ToString(x)));
  }
  return x;
}

}  // namespace spmd::unary_math
