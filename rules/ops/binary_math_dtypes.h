// The binary math family's dtypes (rules/engine/binary_math_list.h), shared by the reference and
// the kernels so that all three refuse the same inputs naming the same field: the bitwise
// ops take int64 or bool only (bool and bool give bool, any int64 gives int64); the others
// take any dtype (the comparisons and logical ops give bool, the arithmetic ones the
// compute dtype, as add does).
#pragma once

#include <string>
#include <string_view>

#include "rules/model/dtype.h"
#include "rules/model/error.h"

namespace spmd::binary_math {

inline bool IsBitwise(std::string_view op) { return op.starts_with("bitwise_"); }

// The bitwise ops' output dtype; throws InvalidArgument "inputs[i].dtype" for the first
// input that is neither int64 nor bool.
inline DType BitwiseDType(std::string_view op, DType x, DType y) {
  const DType dtypes[2] = {x, y};
  for (int i = 0; i < 2; ++i) {
    if (dtypes[i] != DType::kInt64 && dtypes[i] != DType::kBool) {
      ThrowInvalid("inputs[" + std::to_string(i) + "].dtype",
                   std::string(op) + " takes int64 or bool, not " + std::string(ToString(dtypes[i])));
    }
  }
  return x == DType::kBool && y == DType::kBool ? DType::kBool : DType::kInt64;
}

}  // namespace spmd::binary_math
