// Element types. Kept open: a new dtype needs a name here, a size (ElementSize), and
// wherever it is computed on, its loops (kernels/, the Backends).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace spmd {

// bfloat16 and float16 are 2-byte floats (rules/model/half.h: storage and conversion); the CPU
// computes on them in float32.
enum class DType { kFloat64, kFloat32, kInt64, kBool, kBFloat16, kFloat16 };

std::string_view ToString(DType dtype);
// Returns the dtype named `name` ("float64", "float32", "int64", "bool", "bfloat16",
// "float16"), or nothing.
std::optional<DType> ParseDType(std::string_view name);
inline bool IsFloating(DType d) {
  return d == DType::kFloat64 || d == DType::kFloat32 || d == DType::kBFloat16 ||
         d == DType::kFloat16;
}
// bfloat16 or float16.
inline bool IsTwoByteFloat(DType d) { return d == DType::kBFloat16 || d == DType::kFloat16; }

// Bytes per element (bool: 1). Throws SpmdError(kUnsupported, "dtype") for a value outside
// the enum.
int64_t ElementSize(DType dtype);

}  // namespace spmd
