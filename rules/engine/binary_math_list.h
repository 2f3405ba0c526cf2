// The binary math family: Paddle's pointwise ops of two broadcasting inputs and no attrs,
// registered by Paddle 3.3.1 with its elementwise (binary) SPMD rule. One line here per
// op; rules/engine/op_list.h includes the family, so each op is an entry of the registry.
//
// Each op then has one line in each of: rules/ops/binary_math.cc (the declaration: values,
// tolerance, VJP), reference/ops_binary_math.cc (the float64 definition),
// kernels/binary_math.h (the formula the CPU and CUDA kernels share, as a functor
// `NAME_fn` with its kind: arithmetic, bool-valued or bitwise); kernels/cpu/binary_math.cc
// and kernels/cuda/binary_math.cu generate the kernels from this list. docs/OPS.md
// "Binary math" describes them.
#pragma once

#define SPMD_FOR_EACH_BINARY_MATH_OP(X) \
  X(elementwise_pow)                    \
  X(floor_divide)                       \
  X(trunc_divide)                       \
  X(remainder)                          \
  X(fmax)                               \
  X(fmin)                               \
  X(heaviside)                          \
  X(equal)                              \
  X(not_equal)                          \
  X(greater_equal)                      \
  X(less_equal)                         \
  X(logical_and)                        \
  X(logical_or)                         \
  X(logical_xor)                        \
  X(bitwise_and)                        \
  X(bitwise_or)                         \
  X(bitwise_xor)
