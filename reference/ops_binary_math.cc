// The binary math family (rules/engine/binary_math_list.h; docs/OPS.md "Binary math"): each op's
// float64 definition, one line each, written from the definitions (not from the kernels'
// shared formulas in kernels/binary_math.h): out[i] = f(x[i], y[i]) with numpy
// broadcasting. Arithmetic ops give float64, comparisons and logical ops bool, bitwise
// ops int64 (bool for two bool inputs; rules/ops/binary_math_dtypes.h).
//
// Inside namespace ops, floor/remainder/... are ops: math is always std::.
#include <cmath>
#include <cstdint>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/binary_math_dtypes.h"

namespace spmd::reference::ops {
namespace {

// out[i] = f(x, y) broadcast, `dtype` out.
template <typename F>
Tensors Map(const Tensors& inputs, DType dtype, F f) {
  internal::CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  const Shape shape = internal::BroadcastShapes({x.shape, y.shape});
  Tensor out = internal::Zeros(shape, dtype);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    const std::vector<int64_t> index = internal::Unravel(i, shape);
    out.data[i] = f(x.data[internal::BroadcastOffset(index, x.shape)],
                    y.data[internal::BroadcastOffset(index, y.shape)]);
  }
  return {out};
}

double Truth(bool b) { return b ? 1.0 : 0.0; }
int64_t Int(double v) { return static_cast<int64_t>(v); }

// Python's modulo: the remainder takes the divisor's sign (fmod is exact).
double Modulo(double x, double y) {
  const double r = std::fmod(x, y);
  return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

}  // namespace

#define SPMD_ARITH(name, expr) \
  Tensors name(const Tensors& in, const Attrs&) { return Map(in, DType::kFloat64, [](double x, double y) { return expr; }); }
#define SPMD_BOOL(name, expr) \
  Tensors name(const Tensors& in, const Attrs&) { return Map(in, DType::kBool, [](double x, double y) { return Truth(expr); }); }
#define SPMD_BITS(name, expr)                                                                      \
  Tensors name(const Tensors& in, const Attrs&) {                                                  \
    internal::CheckArity(in, 2);                                                                   \
    const DType dtype = binary_math::BitwiseDType(#name, in[0].dtype, in[1].dtype);                \
    return Map(in, dtype, [](double x, double y) { return static_cast<double>(expr); });          \
  }

SPMD_ARITH(elementwise_pow, std::pow(x, y))
SPMD_ARITH(floor_divide, std::floor(x / y))
SPMD_ARITH(trunc_divide, std::trunc(x / y))  // toward zero
SPMD_ARITH(remainder, Modulo(x, y))
SPMD_ARITH(fmax, std::isnan(y) || x > y ? x : y)  // NaN only where both are
SPMD_ARITH(fmin, std::isnan(y) || x < y ? x : y)
SPMD_ARITH(heaviside, x == 0 ? y : Truth(x > 0))
SPMD_BOOL(equal, x == y)
SPMD_BOOL(not_equal, x != y)
SPMD_BOOL(greater_equal, x >= y)
SPMD_BOOL(less_equal, x <= y)
SPMD_BOOL(logical_and, x != 0 && y != 0)
SPMD_BOOL(logical_or, x != 0 || y != 0)
SPMD_BOOL(logical_xor, (x != 0) != (y != 0))
SPMD_BITS(bitwise_and, Int(x) & Int(y))
SPMD_BITS(bitwise_or, Int(x) | Int(y))
SPMD_BITS(bitwise_xor, Int(x) ^ Int(y))

#undef SPMD_ARITH
#undef SPMD_BOOL
#undef SPMD_BITS

}  // namespace spmd::reference::ops
