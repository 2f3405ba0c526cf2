// The unary math family (rules/engine/unary_math_list.h; docs/OPS.md "Unary math"): each op's
// float64 definition, one line each, written from the definitions (not from the kernels'
// shared formulas in kernels/unary_math.h): out[i] = f(x[i]), x's shape, float64.
//
// Inside namespace ops, sin/cos/floor/... are ops: math is always std::.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string_view>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/unary_math_attrs.h"

namespace spmd::reference::ops {
namespace {

// out[i] = f(x[i]) after the family's attr checks, `dtype` out (float64 but for
// logical_not's bool and bitwise_not's int64 / bool: rules/ops/unary_math_attrs.h).
template <typename F>
Tensors Map(const char* op, const Tensors& inputs, const Attrs& attrs, F f) {
  internal::CheckArity(inputs, 1);
  unary_math::CheckAttrs(op, attrs);
  Tensor out;
  out.shape = inputs[0].shape;
  out.dtype = unary_math::IsBitwise(op) ? unary_math::BitwiseDType(op, inputs[0].dtype)
              : std::string_view(op) == "logical_not" ? DType::kBool
                                                      : DType::kFloat64;
  out.data.reserve(inputs[0].data.size());
  for (double v : inputs[0].data) out.data.push_back(f(v));
  return {out};
}

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double Softplus(double v) { return std::log(1.0 + std::exp(v)); }

// psi(x): the recurrence psi(x) = psi(x + 1) - 1 / x up to x >= 20, then the asymptotic
// series ln x - 1/(2x) - sum B_2k / (2k x^2k) to B_10 (next term below 1e-17); below 0
// the reflection psi(1 - x) - pi cot(pi x); NaN at the poles 0, -1, -2, ....
double Digamma(double x) {
  if (x <= 0 && x == std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
  if (x < 0) return Digamma(1 - x) - std::numbers::pi / std::tan(std::numbers::pi * x);
  double r = 0;
  for (; x < 20; x += 1) r -= 1 / x;
  const double f = 1 / (x * x);
  return r + std::log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}

// erf^-1(x) by bisection to the last bit: of erf on [-6, 6] for |x| <= 0.5; of erfc on
// [0, 27] for |x| > 0.5 (1 - |x| is exact there, and erfc keeps its relative accuracy
// where erf(y) rounds to 1); +-inf at +-1, NaN outside [-1, 1].
double Erfinv(double x) {
  if (!(x >= -1 && x <= 1)) return std::numeric_limits<double>::quiet_NaN();
  if (x == 1 || x == -1) return x * std::numeric_limits<double>::infinity();
  const bool tail = std::fabs(x) > 0.5;
  const double target = tail ? 1 - std::fabs(x) : x;
  double lo = tail ? 0 : -6, hi = tail ? 27 : 6;
  for (int i = 0; i < 2000; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid == lo || mid == hi) break;
    const bool below = tail ? std::erfc(mid) > target : std::erf(mid) < target;
    (below ? lo : hi) = mid;
  }
  const double y = lo + (hi - lo) / 2;
  return tail && x < 0 ? -y : y;
}

// ~v of an int64 value as a double; for bool (0 or 1) the negation.
double BitwiseNot(double v, DType dtype) {
  return dtype == DType::kBool ? (v == 0 ? 1.0 : 0.0) : static_cast<double>(~static_cast<int64_t>(v));
}

}  // namespace

#define SPMD_MAP(name, expr) \
  Tensors name(const Tensors& in, const Attrs& a) { return Map(#name, in, a, [&](double x) { return expr; }); }
#define A(n) a.GetFloat(n)

SPMD_MAP(sin, std::sin(x))
SPMD_MAP(cos, std::cos(x))
SPMD_MAP(tan, std::sin(x) / std::cos(x))
SPMD_MAP(asin, std::asin(x))
SPMD_MAP(acos, std::numbers::pi / 2 - std::asin(x))
SPMD_MAP(atan, std::atan(x))
SPMD_MAP(sinh, (std::exp(x) - std::exp(-x)) / 2)
SPMD_MAP(cosh, (std::exp(x) + std::exp(-x)) / 2)
SPMD_MAP(asinh, std::log(x + std::sqrt(x * x + 1)))
SPMD_MAP(acosh, std::log(x + std::sqrt(x * x - 1)))
SPMD_MAP(atanh, 0.5 * std::log((1 + x) / (1 - x)))
SPMD_MAP(expm1, std::expm1(x))
SPMD_MAP(log1p, std::log1p(x))
SPMD_MAP(log2, std::log(x) / std::numbers::ln2)
SPMD_MAP(log10, std::log(x) / std::numbers::ln10)
SPMD_MAP(erf, std::erf(x))
SPMD_MAP(erfinv, Erfinv(x))
SPMD_MAP(lgamma, std::lgamma(x))  // ln |Gamma(x)|
SPMD_MAP(digamma, Digamma(x))
SPMD_MAP(ceil, std::ceil(x))
SPMD_MAP(floor, std::floor(x))
SPMD_MAP(round, x < 0 ? -std::floor(-x + 0.5) : std::floor(x + 0.5))  // halves away from 0
SPMD_MAP(trunc, x < 0 ? std::ceil(x) : std::floor(x))
SPMD_MAP(sign, static_cast<double>((x > 0) - (x < 0)))
SPMD_MAP(reciprocal, 1 / x)
SPMD_MAP(square, x * x)
SPMD_MAP(logsigmoid, std::log(Sigmoid(x)))
SPMD_MAP(softsign, x / (1 + std::fabs(x)))
SPMD_MAP(softplus, A("beta") * x > A("threshold") ? x : Softplus(A("beta") * x) / A("beta"))
SPMD_MAP(mish, x * std::tanh(x > A("threshold") ? x : Softplus(x)))
SPMD_MAP(swish, x * Sigmoid(x))
SPMD_MAP(relu6, std::clamp(x, 0.0, 6.0))
SPMD_MAP(hardswish, x * std::clamp(x + 3, 0.0, 6.0) / 6)
SPMD_MAP(hardsigmoid, std::clamp(A("slope") * x + A("offset"), 0.0, 1.0))
SPMD_MAP(leaky_relu, x > 0 ? x : A("negative_slope") * x)
SPMD_MAP(elu, x > 0 ? x : A("alpha") * (std::exp(x) - 1))
SPMD_MAP(celu, std::max(0.0, x) + std::min(0.0, A("alpha") * (std::exp(x / A("alpha")) - 1)))
SPMD_MAP(selu, A("scale") * (x > 0 ? x : A("alpha") * (std::exp(x) - 1)))
SPMD_MAP(hardshrink, std::fabs(x) > A("threshold") ? x : 0.0)
SPMD_MAP(softshrink, std::fabs(x) > A("threshold") ? x - std::copysign(A("threshold"), x) : 0.0)
SPMD_MAP(hardtanh, std::min(std::max(x, A("t_min")), A("t_max")))
SPMD_MAP(thresholded_relu, x > A("threshold") ? x : A("value"))
SPMD_MAP(stanh, A("scale_b") * std::tanh(A("scale_a") * x))
SPMD_MAP(tanh_shrink, x - std::tanh(x))
SPMD_MAP(assign, x)
SPMD_MAP(conj, x)  // real values
SPMD_MAP(fill, ((void)x, A("value")))
SPMD_MAP(logical_not, x == 0 ? 1.0 : 0.0)
SPMD_MAP(bitwise_not, BitwiseNot(x, in[0].dtype))
// eps > 0: x clamped to [eps, 1 - eps]; eps = 0: NaN outside [0, 1] (Paddle's kernel).
SPMD_MAP(logit, A("eps") == 0 && (x < 0 || x > 1)
                    ? std::numeric_limits<double>::quiet_NaN()
                    : std::log(std::clamp(x, A("eps"), 1 - A("eps")) / (1 - std::clamp(x, A("eps"), 1 - A("eps")))))

#undef A
#undef SPMD_MAP

}  // namespace spmd::reference::ops
