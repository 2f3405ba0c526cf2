#include "rules/dtype.h"

#include "rules/error.h"

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
  }
  return "float64";
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "float64") return DType::kFloat64;
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  if (name == "bool") return DType::kBool;
  return std::nullopt;
}

}  // namespace spmd
