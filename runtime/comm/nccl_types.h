// NCCL's data types and reduce ops, as the plans (runtime/comm/nccl_plan.h) name them, and
// their mapping from spmdkit's dtypes and reduce ops.
#pragma once

#include <cstdint>
#include <string_view>

#include "rules/model/dtype.h"
#include "runtime/comm/communicator.h"

namespace spmd::runtime::nccl {

// The ToString overloads below would hide these.
using runtime::ToString;
using spmd::ToString;

// NCCL's data types and reduce ops that the plans use, with NCCL's values (ncclDataType_t,
// ncclRedOp_t; nccl_communicator.cc checks them against nccl.h).
enum class DataType : int {
  kUint8 = 1,
  kInt64 = 4,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

DataType ToNcclType(DType dtype);     // bool -> uint8, the others their own
DType FromNcclType(DataType type);    // uint8 -> bool
int64_t SizeOf(DataType type);        // bytes per element
RedOp ToNcclOp(ReduceOp op);          // sum, avg -> sum; max, any -> max; min, all -> min
std::string_view ToString(DataType type);  // "uint8", "float32", ...
std::string_view ToString(RedOp op);       // "sum", ...

}  // namespace spmd::runtime::nccl
