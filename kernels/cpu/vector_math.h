// exp and erf for the float32 kernels, written for the compiler's vectorizer: no calls, no
// branches, no table lookups, so a loop over them compiles to SIMD code (libm's expf and
// erff are scalar calls, and were a fifth of a GPT training step). The float64 kernels
// keep libm (Exp / Erf below pick it for double).
//
// Accuracy (kernels/cpu/vector_math_test.cc checks it over every float of a sweep):
// - ExpF: within 2 units in the last place of e^x where e^x is a normal float (measured:
//   1.21); inf above ln(FLT_MAX), 0 or a subnormal below, NaN for NaN.
// - ErfF: within 4e-7 of erf(x) everywhere (measured: 3.3e-7); below |x| = 0.5 a Taylor
//   series, within 2.5e-7 relative (measured: 1.9e-7, about 3 ulp); above, Abramowitz and
//   Stegun's formula 7.1.26 (its own error 1.5e-7) with ExpF. The float32 kernels that use
//   it (gelu, gelu_grad) stay inside their tolerance class (rules/model/tolerance.h: pointwise,
//   (168 |ref| + 17) u).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace spmd::kernels::cpu {

[[gnu::always_inline]] inline float ExpF(float x) {
  // e^x = 2^k e^r with k = round(x / ln 2) and |r| <= ln(2) / 2.
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits: k * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer
  const float xc = std::min(std::max(x, -104.0f), 89.0f);  // NaN stays NaN
  const float kf = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - kf * kLn2Hi) - kf * kLn2Lo;
  // e^r by its Taylor polynomial to r^7 (truncation below 2^-27 relative on |r| <= 0.347).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k (k in [-150, 129]) as two normal powers of two, so no exponent field overflows;
  // the product rounds once, to inf above the range and to a subnormal or 0 below it.
  const int32_t k = static_cast<int32_t>(kf);
  const int32_t k1 = k >> 1;
  const int32_t k2 = k - k1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  const float y = p * s1 * s2;
  return x != x ? x : y;
}

[[gnu::always_inline]] inline float ErfF(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  // |x| < 0.5: 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320).
  float s = -1.0f / 1320.0f;
  s = s * z + 1.0f / 216.0f;
  s = s * z - 1.0f / 42.0f;
  s = s * z + 1.0f / 10.0f;
  s = s * z - 1.0f / 3.0f;
  s = s * z + 1.0f;
  const float small = x * s * 1.12837916709551257f;
  // Elsewhere: 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-x^2), t = 1 / (1 + p |x|).
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float large = std::copysign(1.0f - q * t * ExpF(-z), x);
  return a < 0.5f ? small : large;
}

// The kernels' exp and erf: the SIMD-friendly ones above for float, libm's for double.
template <typename T>
[[gnu::always_inline]] inline T Exp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return ExpF(x);
  } else {
    return std::exp(x);
  }
}
template <typename T>
[[gnu::always_inline]] inline T Erf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return ErfF(x);
  } else {
    return std::erf(x);
  }
}

}  // namespace spmd::kernels::cpu
