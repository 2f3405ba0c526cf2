// The unary math family: Paddle's pointwise ops of one input and at most a few float
// attrs (float out; bool for logical_not, int64 / bool for bitwise_not), registered by
// Paddle 3.3.1 with its elementwise-unary SPMD rule. One line here per op;
// rules/engine/op_list.h includes the family, so each op is an entry of the registry.
//
// Each op then has one line in each of: rules/ops/unary_math.cc (the declaration: domain,
// attrs, tolerance, VJP), reference/ops_unary_math.cc (the float64 definition),
// kernels/unary_math.h (the formula the CPU and CUDA kernels share, as a functor
// `NAME_fn`); kernels/cpu/unary_math.cc and kernels/cuda/unary_math.cu generate the
// kernels from this list. docs/OPS.md "Unary math" describes them.
#pragma once

#define SPMD_FOR_EACH_UNARY_MATH_OP(X) \
  X(sin)                               \
  X(cos)                               \
  X(tan)                               \
  X(asin)                              \
  X(acos)                              \
  X(atan)                              \
  X(sinh)                              \
  X(cosh)                              \
  X(asinh)                             \
  X(acosh)                             \
  X(atanh)                             \
  X(expm1)                             \
  X(log1p)                             \
  X(log2)                              \
  X(log10)                             \
  X(erf)                               \
  X(erfinv)                            \
  X(lgamma)                            \
  X(digamma)                           \
  X(ceil)                              \
  X(floor)                             \
  X(round)                             \
  X(trunc)                             \
  X(sign)                              \
  X(reciprocal)                        \
  X(square)                            \
  X(logsigmoid)                        \
  X(softsign)                          \
  X(softplus)                          \
  X(mish)                              \
  X(swish)                             \
  X(relu6)                             \
  X(hardswish)                         \
  X(hardsigmoid)                       \
  X(leaky_relu)                        \
  X(elu)                               \
  X(celu)                              \
  X(selu)                              \
  X(hardshrink)                        \
  X(softshrink)                        \
  X(hardtanh)                          \
  X(thresholded_relu)                  \
  X(stanh)                             \
  X(tanh_shrink)                       \
  X(logit)                             \
  X(assign)                            \
  X(conj)                              \
  X(fill)                              \
  X(logical_not)                       \
  X(bitwise_not)
