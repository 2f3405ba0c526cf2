#include "rules/model/tolerance.h"

#include <cmath>
#include <utility>

namespace spmd {

std::string_view ToString(ToleranceClass tolerance) {
  switch (tolerance) {
    case ToleranceClass::kExact: return "exact";
    case ToleranceClass::kPointwise: return "pointwise";
    case ToleranceClass::kSumOfProducts: return "sum_of_products";
    case ToleranceClass::kRelative: return "relative";
    case ToleranceClass::kLogDomain: return "log_domain";
    case ToleranceClass::kCrossEntropy: return "cross_entropy";
    case ToleranceClass::kLayerNorm: return "layer_norm";
    case ToleranceClass::kGroupNorm: return "group_norm";
    case ToleranceClass::kBatchNorm: return "batch_norm";
    case ToleranceClass::kRmsNorm: return "rms_norm";
    case ToleranceClass::kSoftmaxGrad: return "softmax_grad";
    case ToleranceClass::kAttention: return "attention";
    case ToleranceClass::kLayerNormGrad: return "layer_norm_grad";
    case ToleranceClass::kRmsNormGrad: return "rms_norm_grad";
    case ToleranceClass::kAttentionGrad: return "attention_grad";
  }
  return "exact";
}

double UnitRoundoff(DType dtype) {
  // Significand bits, the implicit one included: u = 2^-bits.
  static constexpr std::pair<std::string_view, int> kBits[] = {
      {"float64", 53}, {"float32", 24}, {"float16", 11}, {"bfloat16", 8}};
  const std::string_view name = ToString(dtype);
  for (const auto& [floating, bits] : kBits) {
    if (name == floating) return std::ldexp(1.0, -bits);
  }
  return 0;
}

}  // namespace spmd
