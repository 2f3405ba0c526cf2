// The formulas of the unary math family (rules/engine/unary_math_list.h), one functor `NAME_fn<T>`
// per op, shared by the CPU kernels (kernels/cpu/unary_math.cc) and the CUDA kernels
// (kernels/cuda/unary_math.cu) so that both compute the same expression in T. Each functor
// has its kind, Make(attrs) (host: reads the normalised attrs) and operator()(T x) (host
// and device) returning Out:
// - kFloat: T float or double (the compute dtype), Out T (every op but the two below);
// - kBool: T float or double, Out bool (logical_not);
// - kBitwise: T int64_t or bool (rules/ops/unary_math_attrs.h), Out T (bitwise_not). The float64 references (reference/ops_unary_math.cc)
// are written separately from the definitions, not from these.
//
// The math calls go to the C library's float and double functions (sinf / sin, ...), which
// are host and device functions under nvcc: results agree within the libraries' few ulps.
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "rules/model/attrs.h"
#include "rules/model/half.h"  // SPMD_HOST_DEVICE

namespace spmd::kernels::unary_math {

enum class Kind { kFloat, kBool, kBitwise };

// ---- float / double overloads of the C library's functions ------------------------------

#define SPMD_UNARY_MATH_LIBM(Name, fn)                                 \
  SPMD_HOST_DEVICE inline float Name(float v) { return ::fn##f(v); }  \
  SPMD_HOST_DEVICE inline double Name(double v) { return ::fn(v); }
SPMD_UNARY_MATH_LIBM(Sin, sin)
SPMD_UNARY_MATH_LIBM(Cos, cos)
SPMD_UNARY_MATH_LIBM(Tan, tan)
SPMD_UNARY_MATH_LIBM(Asin, asin)
SPMD_UNARY_MATH_LIBM(Acos, acos)
SPMD_UNARY_MATH_LIBM(Atan, atan)
SPMD_UNARY_MATH_LIBM(Sinh, sinh)
SPMD_UNARY_MATH_LIBM(Cosh, cosh)
SPMD_UNARY_MATH_LIBM(Tanh, tanh)
SPMD_UNARY_MATH_LIBM(Asinh, asinh)
SPMD_UNARY_MATH_LIBM(Acosh, acosh)
SPMD_UNARY_MATH_LIBM(Atanh, atanh)
SPMD_UNARY_MATH_LIBM(Exp, exp)
SPMD_UNARY_MATH_LIBM(Expm1, expm1)
SPMD_UNARY_MATH_LIBM(Log, log)
SPMD_UNARY_MATH_LIBM(Log1p, log1p)
SPMD_UNARY_MATH_LIBM(Log2, log2)
SPMD_UNARY_MATH_LIBM(Log10, log10)
SPMD_UNARY_MATH_LIBM(Erf, erf)
SPMD_UNARY_MATH_LIBM(Ceil, ceil)
SPMD_UNARY_MATH_LIBM(Floor, floor)
SPMD_UNARY_MATH_LIBM(Round, round)  // halves away from zero, as Paddle's std::round
SPMD_UNARY_MATH_LIBM(Trunc, trunc)
SPMD_UNARY_MATH_LIBM(Fabs, fabs)
#undef SPMD_UNARY_MATH_LIBM

// ln |Gamma(x)| and psi(x), in double for both T (rounded once to float): digamma's
// recurrence cancels near its zero at 1.46, beyond float32's pointwise bound.
SPMD_HOST_DEVICE inline double LgammaD(double v) { return ::lgamma(v); }
// psi: the reflection psi(1 - x) - pi cot(pi x) below 0; the recurrence psi(x + 1) - 1 / x
// up to x >= 10; then ln x - 1/(2x) - sum B_2k / (2k x^2k) to B_12. NaN at 0, -1, ....
SPMD_HOST_DEVICE inline double DigammaD(double x) {
  constexpr double kPi = 3.14159265358979323846;
  if (x <= 0 && x == ::floor(x)) return ::nan("");
  double r = 0;
  if (x < 0) {
    r = -kPi / ::tan(kPi * x);
    x = 1 - x;
  }
  while (x < 10) {
    r -= 1 / x;
    x += 1;
  }
  const double f = 1 / (x * x);
  const double series =
      f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132 - f * (691.0 / 32760))))));
  return r + ::log(x) - 0.5 / x - series;
}

// erf^-1(x), in double for both T (rounded once to float): Giles' single-precision
// approximation ("Approximating the erfinv function", 2010), then three Newton steps on
// erf(y) = x (each squares the relative error). +-inf at +-1, NaN outside [-1, 1].
SPMD_HOST_DEVICE inline double ErfinvD(double x) {
  if (!(x >= -1 && x <= 1)) return ::nan("");
  if (x == 1 || x == -1) return x * ::exp(1000.0);  // +-inf
  double w = -::log((1 - x) * (1 + x));
  double p;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = ::sqrt(w) - 3;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double y = p * x;
  constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
  for (int i = 0; i < 3; ++i) y -= (::erf(y) - x) / (kTwoOverSqrtPi * ::exp(-y * y));
  return y;
}

template <class T>
SPMD_HOST_DEVICE inline T Max(T a, T b) { return a > b ? a : b; }
template <class T>
SPMD_HOST_DEVICE inline T Min(T a, T b) { return a < b ? a : b; }

// ---- the functors -----------------------------------------------------------------------

// An op without attrs: out = F(x).
#define SPMD_UNARY_MATH_PLAIN(name, expr)                      \
  template <class T>                                          \
  struct name##_fn {                                          \
    static constexpr Kind kKind = Kind::kFloat;                \
    using Out = T;                                            \
    static name##_fn Make(const Attrs&) { return {}; }        \
    SPMD_HOST_DEVICE T operator()(T x) const { return expr; } \
  };
// An op with one float attr `a` (Paddle's name `attr`).
#define SPMD_UNARY_MATH_ONE(name, attr, expr)                                   \
  template <class T>                                                           \
  struct name##_fn {                                                           \
    static constexpr Kind kKind = Kind::kFloat;                                \
    using Out = T;                                                             \
    T a;                                                                       \
    static name##_fn Make(const Attrs& s) { return {static_cast<T>(s.GetFloat(attr))}; } \
    SPMD_HOST_DEVICE T operator()(T x) const { return expr; }                  \
  };
// An op with two float attrs `a` and `b`.
#define SPMD_UNARY_MATH_TWO(name, attr_a, attr_b, expr)                         \
  template <class T>                                                           \
  struct name##_fn {                                                           \
    static constexpr Kind kKind = Kind::kFloat;                                \
    using Out = T;                                                             \
    T a, b;                                                                    \
    static name##_fn Make(const Attrs& s) {                                    \
      return {static_cast<T>(s.GetFloat(attr_a)), static_cast<T>(s.GetFloat(attr_b))}; \
    }                                                                          \
    SPMD_HOST_DEVICE T operator()(T x) const { return expr; }                  \
  };

SPMD_UNARY_MATH_PLAIN(sin, Sin(x))
SPMD_UNARY_MATH_PLAIN(cos, Cos(x))
SPMD_UNARY_MATH_PLAIN(tan, Tan(x))
SPMD_UNARY_MATH_PLAIN(asin, Asin(x))
SPMD_UNARY_MATH_PLAIN(acos, Acos(x))
SPMD_UNARY_MATH_PLAIN(atan, Atan(x))
SPMD_UNARY_MATH_PLAIN(sinh, Sinh(x))
SPMD_UNARY_MATH_PLAIN(cosh, Cosh(x))
SPMD_UNARY_MATH_PLAIN(asinh, Asinh(x))
SPMD_UNARY_MATH_PLAIN(acosh, Acosh(x))
SPMD_UNARY_MATH_PLAIN(atanh, Atanh(x))
SPMD_UNARY_MATH_PLAIN(expm1, Expm1(x))
SPMD_UNARY_MATH_PLAIN(log1p, Log1p(x))
SPMD_UNARY_MATH_PLAIN(log2, Log2(x))
SPMD_UNARY_MATH_PLAIN(log10, Log10(x))
SPMD_UNARY_MATH_PLAIN(erf, Erf(x))
SPMD_UNARY_MATH_PLAIN(lgamma, static_cast<T>(LgammaD(static_cast<double>(x))))
SPMD_UNARY_MATH_PLAIN(digamma, static_cast<T>(DigammaD(static_cast<double>(x))))
SPMD_UNARY_MATH_PLAIN(ceil, Ceil(x))
SPMD_UNARY_MATH_PLAIN(floor, Floor(x))
SPMD_UNARY_MATH_PLAIN(round, Round(x))  // decimals = 0 (rules/ops/unary_math_attrs.h)
SPMD_UNARY_MATH_PLAIN(trunc, Trunc(x))
SPMD_UNARY_MATH_PLAIN(sign, x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)))
SPMD_UNARY_MATH_PLAIN(reciprocal, T(1) / x)
SPMD_UNARY_MATH_PLAIN(square, x * x)
// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow for either sign.
SPMD_UNARY_MATH_PLAIN(logsigmoid, Min(x, T(0)) - Log1p(Exp(-Fabs(x))))
SPMD_UNARY_MATH_PLAIN(softsign, x / (T(1) + Fabs(x)))
// beta x above threshold: x itself (Paddle's linear branch).
SPMD_UNARY_MATH_TWO(softplus, "beta", "threshold", a * x > b ? x : Log1p(Exp(a * x)) / a)
SPMD_UNARY_MATH_ONE(mish, "threshold", x * Tanh(x > a ? x : Log1p(Exp(x))))
SPMD_UNARY_MATH_PLAIN(swish, x / (T(1) + Exp(-x)))
SPMD_UNARY_MATH_PLAIN(relu6, Min(Max(x, T(0)), T(6)))
SPMD_UNARY_MATH_PLAIN(hardswish, x * Min(Max(x + T(3), T(0)), T(6)) / T(6))
SPMD_UNARY_MATH_TWO(hardsigmoid, "slope", "offset", Max(T(0), Min(T(1), a * x + b)))
SPMD_UNARY_MATH_ONE(leaky_relu, "negative_slope", x > T(0) ? x : x * a)
SPMD_UNARY_MATH_ONE(elu, "alpha", x > T(0) ? x : a * Expm1(x))
SPMD_UNARY_MATH_ONE(celu, "alpha", x > T(0) ? x : a * Expm1(x / a))
SPMD_UNARY_MATH_TWO(selu, "scale", "alpha", x > T(0) ? a * x : a * b * Expm1(x))
SPMD_UNARY_MATH_ONE(hardshrink, "threshold", (x < -a || x > a) ? x : T(0))
SPMD_UNARY_MATH_ONE(softshrink, "threshold", x > a ? x - a : (x < -a ? x + a : T(0)))
SPMD_UNARY_MATH_TWO(hardtanh, "t_min", "t_max", Min(Max(x, a), b))
SPMD_UNARY_MATH_TWO(thresholded_relu, "threshold", "value", x > a ? x : b)
SPMD_UNARY_MATH_TWO(stanh, "scale_a", "scale_b", b * Tanh(a * x))
SPMD_UNARY_MATH_PLAIN(tanh_shrink, x - Tanh(x))
SPMD_UNARY_MATH_PLAIN(assign, x)

SPMD_UNARY_MATH_PLAIN(erfinv, static_cast<T>(ErfinvD(static_cast<double>(x))))
SPMD_UNARY_MATH_PLAIN(conj, x)  // real values: the identity
SPMD_UNARY_MATH_ONE(fill, "value", ((void)x, a))  // every element the value, x's read nowhere

// logit(x) = log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps > 0; with eps = 0 a
// value outside [0, 1] gives NaN (Paddle's kernel).
template <class T>
struct logit_fn {
  static constexpr Kind kKind = Kind::kFloat;
  using Out = T;
  T eps;
  static logit_fn Make(const Attrs& s) { return {static_cast<T>(s.GetFloat("eps"))}; }
  SPMD_HOST_DEVICE T operator()(T x) const {
    if (eps == T(0)) {
      if (x < T(0) || x > T(1)) return std::numeric_limits<T>::quiet_NaN();
      return Log(x / (T(1) - x));
    }
    const T c = Min(Max(x, eps), T(1) - eps);
    return Log(c / (T(1) - c));
  }
};

// logical_not: x == 0, in the compute dtype (any input dtype), out bool.
template <class T>
struct logical_not_fn {
  static constexpr Kind kKind = Kind::kBool;
  using Out = bool;
  static logical_not_fn Make(const Attrs&) { return {}; }
  SPMD_HOST_DEVICE bool operator()(T x) const { return x == T(0); }
};

// bitwise_not: ~x in int64 (two's complement: -x - 1), !x for bool.
template <class T>
struct bitwise_not_fn {
  static constexpr Kind kKind = Kind::kBitwise;
  using Out = T;
  static bitwise_not_fn Make(const Attrs&) { return {}; }
  SPMD_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return !x;
    } else {
      return static_cast<T>(~x);
    }
  }
};

#undef SPMD_UNARY_MATH_PLAIN
#undef SPMD_UNARY_MATH_ONE
#undef SPMD_UNARY_MATH_TWO

}  // namespace spmd::kernels::unary_math
