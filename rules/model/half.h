// The 2-byte floating types: bfloat16 (1 sign, 8 exponent, 7 mantissa bits: float32's
// range, 2^-8 unit roundoff) and float16 (IEEE 754 binary16: 1, 5, 10; largest finite
// 65504, 2^-11 unit roundoff). Storage and conversion only: arithmetic converts to float32.
//
// Conversions to the 2-byte types round to nearest, ties to even, with IEEE overflow (to
// infinity) and gradual underflow (float16 subnormals; bfloat16 keeps float32's), and keep
// the sign of zero. A NaN stays a NaN with its sign and the top bits of its payload; where
// those bits are all zero the quiet bit is set, so every 2-byte NaN converts to float32 and
// back to itself. Conversions to float32 are exact.
//
// Plain C++ (no library calls but memcpy, no exceptions), so CUDA device code can use it.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPMD_HOST_DEVICE __host__ __device__
#else
#define SPMD_HOST_DEVICE
#endif

namespace spmd {

namespace half_detail {

SPMD_HOST_DEVICE inline uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
SPMD_HOST_DEVICE inline float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
SPMD_HOST_DEVICE inline uint64_t BitsOf(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// `d` rounded to float32 with round-to-odd: exact values stay, inexact ones land on the
// neighbour whose last mantissa bit is 1. Rounding that to a 2-byte type (at most 11
// significant bits, well under float32's 24 - 2) then rounds `d` once, correctly.
SPMD_HOST_DEVICE inline float RoundToOddFloat(double d) {
  const double ad = d < 0 ? -d : d;
  if (ad > 3.4028234663852886e38 && ad - ad == 0) {
    // Finite beyond float32's range (converting it would be undefined): round-to-odd
    // gives the largest finite float32, 0x7f7fffff, which is odd.
    return FloatOf(d < 0 ? 0xff7fffffu : 0x7f7fffffu);
  }
  const float f = static_cast<float>(d);  // nearest, ties to even
  if (d != d || static_cast<double>(f) == d) return f;  // NaN, or exact
  uint32_t u = BitsOf(f);
  if ((u & 1u) == 0) {
    // Step one ulp towards d (|f| > |d|: down in magnitude; |f| < |d|: up).
    const double af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
    u = af > ad ? u - 1 : u + 1;
  }
  return FloatOf(u);
}

}  // namespace half_detail

// bfloat16 bits of `f`.
SPMD_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t u = half_detail::BitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign and top payload bits
    uint16_t h = static_cast<uint16_t>(u >> 16);
    if ((h & 0x7fu) == 0) h |= 0x40u;
    return h;
  }
  // Add just under half an ulp of the result, plus one when the kept part is odd: carries
  // into the kept bits exactly when the dropped part is above half, or half and odd.
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

SPMD_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t h) {
  return half_detail::FloatOf(static_cast<uint32_t>(h) << 16);
}

// float16 (binary16) bits of `f`.
SPMD_HOST_DEVICE inline uint16_t FloatToFloat16Bits(float f) {
  const uint32_t u = half_detail::BitsOf(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN
    uint16_t h = static_cast<uint16_t>(sign | 0x7c00u | ((a >> 13) & 0x3ffu));
    if ((h & 0x3ffu) == 0) h |= 0x200u;
    return h;
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a >= 0x38800000u) {  // >= 2^-14: normal
    uint32_t h = (a - 0x38000000u) >> 13;  // rebias the exponent 127 -> 15, drop 13 bits
    const uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal or zero: the result counts units of 2^-24.
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below 2^-25 (or float32 subnormal): rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // value = m * 2^(e - 150)
  const uint32_t shift = 126 - e;                   // m * 2^(e-150) / 2^-24 = m >> shift
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // 1024 is the smallest normal: right
  return static_cast<uint16_t>(sign | h);
}

SPMD_HOST_DEVICE inline float Float16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return half_detail::FloatOf(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return half_detail::FloatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return half_detail::FloatOf(sign);
  uint32_t e = 113;  // a subnormal: normalise (value = mantissa * 2^-24)
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return half_detail::FloatOf(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

// Rounded once from a double (through a round-to-odd float32, see above).
SPMD_HOST_DEVICE inline uint16_t DoubleToBFloat16Bits(double d) {
  return FloatToBFloat16Bits(half_detail::RoundToOddFloat(d));
}
SPMD_HOST_DEVICE inline uint16_t DoubleToFloat16Bits(double d) {
  return FloatToFloat16Bits(half_detail::RoundToOddFloat(d));
}

// Storage types: the bits, nothing else (no arithmetic: convert to float).
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  SPMD_HOST_DEVICE explicit BFloat16(float f) : bits(FloatToBFloat16Bits(f)) {}
  SPMD_HOST_DEVICE explicit operator float() const { return BFloat16BitsToFloat(bits); }
  SPMD_HOST_DEVICE static BFloat16 FromBits(uint16_t b) {
    BFloat16 x;
    x.bits = b;
    return x;
  }
};

struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  SPMD_HOST_DEVICE explicit Float16(float f) : bits(FloatToFloat16Bits(f)) {}
  SPMD_HOST_DEVICE explicit operator float() const { return Float16BitsToFloat(bits); }
  SPMD_HOST_DEVICE static Float16 FromBits(uint16_t b) {
    Float16 x;
    x.bits = b;
    return x;
  }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2, "2-byte storage");

}  // namespace spmd
