#include "runtime/comm/nccl_types.h"

#include <stdexcept>

namespace spmd::runtime::nccl {

DataType ToNcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return DataType::kFloat64;
    case DType::kFloat32: return DataType::kFloat32;
    case DType::kInt64: return DataType::kInt64;
    case DType::kBool: return DataType::kUint8;
    case DType::kBFloat16: return DataType::kBfloat16;
    case DType::kFloat16: return DataType::kFloat16;
  }
  throw std::logic_error("ToNcclType: unknown dtype");
}

DType FromNcclType(DataType type) {
  switch (type) {
    case DataType::kFloat64: return DType::kFloat64;
    case DataType::kFloat32: return DType::kFloat32;
    case DataType::kInt64: return DType::kInt64;
    case DataType::kUint8: return DType::kBool;
    case DataType::kBfloat16: return DType::kBFloat16;
    case DataType::kFloat16: return DType::kFloat16;
  }
  throw std::logic_error("FromNcclType: unknown type");
}

int64_t SizeOf(DataType type) { return static_cast<int64_t>(ElementSize(FromNcclType(type))); }

RedOp ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return RedOp::kSum;
    case ReduceOp::kProd: return RedOp::kProd;
    case ReduceOp::kMax:
    case ReduceOp::kAny: return RedOp::kMax;
    case ReduceOp::kMin:
    case ReduceOp::kAll: return RedOp::kMin;
  }
  throw std::logic_error("ToNcclOp: unknown op");
}

std::string_view ToString(DataType type) {
  switch (type) {
    case DataType::kUint8: return "uint8";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBfloat16: return "bfloat16";
  }
  return "?";
}

std::string_view ToString(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
  }
  return "?";
}

}  // namespace spmd::runtime::nccl
