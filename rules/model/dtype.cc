#include "rules/model/dtype.h"

#include <string>

#include "rules/model/error.h"

namespace spmd {

std::string_view ToString(ErrorType type) {
  switch (type) {
    case ErrorType::kInvalidArgument: return "InvalidArgument";
    case ErrorType::kUnknownOp: return "UnknownOp";
    case ErrorType::kUnsupported: return "Unsupported";
    case ErrorType::kConflict: return "Conflict";
  }
  return "InvalidArgument";
}

std::string_view ToString(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return "float64";
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "float64";
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "float64") return DType::kFloat64;
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  if (name == "bool") return DType::kBool;
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float16") return DType::kFloat16;
  return std::nullopt;
}

int64_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 8;
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
  }
  ThrowUnsupported("dtype", "no element size for dtype " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace spmd
