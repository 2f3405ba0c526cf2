// How far a run of an op in a floating dtype may be from its float64 reference: the
// op's tolerance class (declared on the op, OpDecl::tolerance) and the dtype's unit
// roundoff. The bounds themselves (one formula per class, in units of u) are the tests'
// business (property_tests/tolerance.h); the class says which kind of computation the
// op is, so that a new op picks a class instead of a test learning its name.
#pragma once

#include <string_view>

#include "rules/model/dtype.h"

namespace spmd {

// K = terms one output element reduces over, M = max(1, max |float input|), u = the unit
// roundoff of the precision the kernel computes in.
enum class ToleranceClass {
  kExact,          // moves, selects or compares values: the result is the reference rounded
  kPointwise,      // one formula per element: (168 |ref| + 17) u
  kSumOfProducts,  // sums of products: 2 (K + 2) u A, A = the reference on |inputs|
  kRelative,       // positive sums then a division or a root: softmax, p_norm
  kLogDomain,      // x - max - log(sum exp): logsumexp, log_softmax
  kCrossEntropy,   // softmax and a loss summing K terms
  kLayerNorm,      // mean, two-pass variance, normalised output
  kGroupNorm,      // kLayerNorm per (sample, group of channels): group_norm, instance_norm
  kBatchNorm,      // kLayerNorm per channel, with running statistics and the inverse root
  kRmsNorm,        // one sum of K squares, then products
  kSoftmaxGrad,    // out (g - sum(g out))
  kAttention,      // softmax of scaled dot products over K keys, then a weighted sum
  kLayerNormGrad,  // layer_norm_grad: a row's two means of products, then a difference
  kRmsNormGrad,    // rms_norm_grad: a row's mean of products, then a difference
  kAttentionGrad,  // flash_attn_grad: exp(score - lse) times a difference of dot products, summed
};

std::string_view ToString(ToleranceClass tolerance);

// Returns the unit roundoff of a floating dtype (2^-53 float64, 2^-24 float32, 2^-11
// float16, 2^-8 bfloat16: half the distance from 1 to the next value), or 0 for an exact
// dtype (int64, bool). Keyed by the dtype's name, so that a floating dtype added later
// gets its roundoff from this table without a new case.
double UnitRoundoff(DType dtype);

}  // namespace spmd
