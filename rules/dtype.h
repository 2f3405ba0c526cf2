// Element types. Kept open (bf16/fp16 come with the GPU backend).
#pragma once

#include <optional>
#include <string_view>

namespace spmd {

enum class DType { kFloat64, kFloat32, kInt64, kBool };

std::string_view ToString(DType dtype);
// Returns the dtype named `name` ("float64", "float32", "int64", "bool"), or nothing.
std::optional<DType> ParseDType(std::string_view name);
inline bool IsFloating(DType d) { return d == DType::kFloat64 || d == DType::kFloat32; }

}  // namespace spmd
