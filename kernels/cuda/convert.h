// Element conversions of the CUDA kernels, in plain C++ callable on the host and the device
// (the CPU tests check them against the CPU kernels). Two families:
// - CastElement<D>(v): cast's rules (kernels/cpu/elementwise.cc): float32 through double,
//   saturating to +-FLT_MAX or +-inf as round-to-nearest gives; int64 truncating toward
//   zero (only for values CastFitsInt64 accepts: the caller refuses the others); bool
//   v != 0 (NaN is true); bfloat16 / float16 rounded once from the double value
//   (rules/model/half.h). A 2-byte source is its exact float32 value.
// - ValueAs<C>(v): how an elementwise kernel reads a value input in its compute type C
//   (the CPU's ValuesAs: a plain conversion, int64 -> float rounding once; bool 0 / 1; a
//   2-byte float its float32 value), and ConditionOf(v): where's condition (v != 0).
// FillBits gives the element Backend::Fill writes.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "rules/model/dtype.h"
#include "rules/model/half.h"

namespace spmd::kernels::cuda {

template <class T>
inline constexpr bool kIsTwoByte = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// `v` (any element type) as a double: exact for every type but int64 beyond 2^53.
template <class S>
SPMD_HOST_DEVICE inline double AsDouble(S v) {
  if constexpr (kIsTwoByte<S>) {
    return static_cast<double>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<S, bool>) {
    return v ? 1.0 : 0.0;
  } else {
    return static_cast<double>(v);
  }
}

// A double as float32, rounded to nearest, without the undefined out-of-range conversion:
// beyond float32's range +-FLT_MAX below the halfway point to 2^128, else +-inf.
SPMD_HOST_DEVICE inline float SaturateToFloat(double v) {
  constexpr double kMax = 3.4028234663852886e38;  // FLT_MAX
  constexpr double kHalfway = kMax + 0x1p103;     // FLT_MAX + half an ulp
  const double a = v < 0 ? -v : v;
  if (!(a > kMax)) return static_cast<float>(v);  // NaN included
  const float r = a < kHalfway ? half_detail::FloatOf(0x7f7fffffu) : half_detail::FloatOf(0x7f800000u);
  return v < 0 ? -r : r;
}

// True when cast to int64 accepts `v`: trunc(v) in [-2^63, 2^63) (not NaN or inf).
SPMD_HOST_DEVICE inline bool CastFitsInt64(double v) {
  const double t = ::trunc(v);
  return t >= -9223372036854775808.0 && t < 9223372036854775808.0;
}

template <class D, class S>
SPMD_HOST_DEVICE inline D CastElement(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, double>) {
    return AsDouble(v);
  } else if constexpr (std::is_same_v<D, float>) {
    return SaturateToFloat(AsDouble(v));
  } else if constexpr (std::is_same_v<D, int64_t>) {
    if constexpr (std::is_same_v<S, bool>) {
      return v ? 1 : 0;
    } else {
      return static_cast<int64_t>(::trunc(AsDouble(v)));
    }
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (std::is_same_v<S, int64_t>) {
      return v != 0;
    } else {
      return AsDouble(v) != 0.0;  // NaN != 0
    }
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return BFloat16::FromBits(DoubleToBFloat16Bits(AsDouble(v)));
  } else {
    static_assert(std::is_same_v<D, Float16>, "CastElement: an element type of rules/model/dtype.h");
    return Float16::FromBits(DoubleToFloat16Bits(AsDouble(v)));
  }
}

template <class C, class S>
SPMD_HOST_DEVICE inline C ValueAs(S v) {
  if constexpr (kIsTwoByte<S>) {
    return static_cast<C>(static_cast<float>(v));
  } else {
    return static_cast<C>(v);
  }
}

template <class S>
SPMD_HOST_DEVICE inline bool ConditionOf(S v) {
  if constexpr (kIsTwoByte<S>) {
    return (v.bits & 0x7fffu) != 0;  // only +-0 is false; NaN is true
  } else {
    return static_cast<bool>(v);
  }
}

// The element Backend::Fill writes for `value` in `dtype` (as CpuBackend::Fill converts
// it), as its bytes in the low ElementSize(dtype) bytes of the result (little-endian).
inline uint64_t FillBits(DType dtype, double value) {
  uint64_t bits = 0;
  switch (dtype) {
    case DType::kFloat64: {
      const double v = value;
      __builtin_memcpy(&bits, &v, 8);
      break;
    }
    case DType::kFloat32: {
      const float v = static_cast<float>(value);
      uint32_t u;
      __builtin_memcpy(&u, &v, 4);
      bits = u;
      break;
    }
    case DType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      __builtin_memcpy(&bits, &v, 8);
      break;
    }
    case DType::kBool: bits = value != 0 ? 1 : 0; break;
    case DType::kBFloat16: bits = DoubleToBFloat16Bits(value); break;
    case DType::kFloat16: bits = DoubleToFloat16Bits(value); break;
  }
  return bits;
}

}  // namespace spmd::kernels::cuda
