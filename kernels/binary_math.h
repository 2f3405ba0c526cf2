// The formulas of the binary math family (rules/engine/binary_math_list.h), one functor
// `NAME_fn<T>` per op, shared by the CPU kernels (kernels/cpu/binary_math.cc) and the CUDA
// kernels (kernels/cuda/binary_math.cu) so that both compute the same expression in T.
// Each functor has its kind and operator()(T x, T y) (host and device):
// - kArithmetic: T float or double (the compute dtype), out T;
// - kBool: T float or double, out bool (comparisons, logical ops);
// - kBitwise: T int64_t or bool (rules/ops/binary_math_dtypes.h), out T.
// The float64 references (reference/ops_binary_math.cc) are written separately.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "rules/model/half.h"  // SPMD_HOST_DEVICE

namespace spmd::kernels::binary_math {

enum class Kind { kArithmetic, kBool, kBitwise };

// ---- float / double overloads of the C library's functions ------------------------------

#define SPMD_BINARY_MATH_LIBM2(Name, fn)                                          \
  SPMD_HOST_DEVICE inline float Name(float a, float b) { return ::fn##f(a, b); }  \
  SPMD_HOST_DEVICE inline double Name(double a, double b) { return ::fn(a, b); }
SPMD_BINARY_MATH_LIBM2(Pow, pow)
SPMD_BINARY_MATH_LIBM2(Fmod, fmod)
SPMD_BINARY_MATH_LIBM2(Fmax, fmax)
SPMD_BINARY_MATH_LIBM2(Fmin, fmin)
#undef SPMD_BINARY_MATH_LIBM2
SPMD_HOST_DEVICE inline float Floor(float v) { return ::floorf(v); }
SPMD_HOST_DEVICE inline double Floor(double v) { return ::floor(v); }
SPMD_HOST_DEVICE inline float Trunc(float v) { return ::truncf(v); }
SPMD_HOST_DEVICE inline double Trunc(double v) { return ::trunc(v); }

// Python's modulo (Paddle's remainder): fmod, moved to the divisor's sign.
template <class T>
SPMD_HOST_DEVICE inline T Modulo(T x, T y) {
  const T r = Fmod(x, y);
  return (r != T(0) && (r < T(0)) != (y < T(0))) ? r + y : r;
}

// ---- the functors -----------------------------------------------------------------------

#define SPMD_BINARY_MATH_FN(name, kind, expr)                                     \
  template <class T>                                                             \
  struct name##_fn {                                                             \
    static constexpr Kind kKind = Kind::kind;                                    \
    using Out = std::conditional_t<kKind == Kind::kBool, bool, T>;               \
    SPMD_HOST_DEVICE Out operator()(T x, T y) const { return static_cast<Out>(expr); } \
  };

SPMD_BINARY_MATH_FN(elementwise_pow, kArithmetic, Pow(x, y))
SPMD_BINARY_MATH_FN(floor_divide, kArithmetic, Floor(x / y))
SPMD_BINARY_MATH_FN(trunc_divide, kArithmetic, Trunc(x / y))
SPMD_BINARY_MATH_FN(remainder, kArithmetic, Modulo(x, y))
SPMD_BINARY_MATH_FN(fmax, kArithmetic, Fmax(x, y))
SPMD_BINARY_MATH_FN(fmin, kArithmetic, Fmin(x, y))
SPMD_BINARY_MATH_FN(heaviside, kArithmetic, x == T(0) ? y : (x > T(0) ? T(1) : T(0)))
SPMD_BINARY_MATH_FN(equal, kBool, x == y)
SPMD_BINARY_MATH_FN(not_equal, kBool, x != y)
SPMD_BINARY_MATH_FN(greater_equal, kBool, x >= y)
SPMD_BINARY_MATH_FN(less_equal, kBool, x <= y)
SPMD_BINARY_MATH_FN(logical_and, kBool, x != T(0) && y != T(0))
SPMD_BINARY_MATH_FN(logical_or, kBool, x != T(0) || y != T(0))
SPMD_BINARY_MATH_FN(logical_xor, kBool, (x != T(0)) != (y != T(0)))
SPMD_BINARY_MATH_FN(bitwise_and, kBitwise, x & y)
SPMD_BINARY_MATH_FN(bitwise_or, kBitwise, x | y)
SPMD_BINARY_MATH_FN(bitwise_xor, kBitwise, x ^ y)

#undef SPMD_BINARY_MATH_FN

}  // namespace spmd::kernels::binary_math
