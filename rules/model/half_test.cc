// The 2-byte float conversions (rules/model/half.h) against a reference written differently:
// values decoded from the bit fields with ldexp, and rounding by searching a sorted table of
// every finite value for the nearest one (ties to the even bit pattern), in double.
#include "rules/model/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace spmd {
namespace {

struct Format {
  const char* name;
  int mantissa_bits;  // 7 (bfloat16), 10 (float16)
  int exponent_bits;  // 8, 5
  uint16_t (*from_float)(float);
  float (*to_float)(uint16_t);
  uint16_t (*from_double)(double);
};

const Format kFormats[] = {
    {"bfloat16", 7, 8, FloatToBFloat16Bits, BFloat16BitsToFloat, DoubleToBFloat16Bits},
    {"float16", 10, 5, FloatToFloat16Bits, Float16BitsToFloat, DoubleToFloat16Bits},
};

uint16_t InfBits(const Format& f) { return static_cast<uint16_t>(((1u << f.exponent_bits) - 1) << f.mantissa_bits); }

// The value of `bits` from its fields (NaN for every NaN pattern).
double Decode(const Format& f, uint16_t bits) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const bool negative = (bits >> 15) != 0;
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  double v;
  if (exponent == (1 << f.exponent_bits) - 1) {
    v = mantissa == 0 ? std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), 1 - bias - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<double>((1 << f.mantissa_bits) + mantissa),
                   exponent - bias - f.mantissa_bits);
  }
  return negative ? -v : v;
}

// Every non-negative finite value in increasing order (index = bit pattern), then the value
// the next pattern (infinity) would have with the exponent range extended: a value at or
// past the midpoint between the largest finite one and it rounds to infinity.
std::vector<double> Table(const Format& f) {
  std::vector<double> t;
  for (uint32_t b = 0; b < InfBits(f); ++b) t.push_back(Decode(f, static_cast<uint16_t>(b)));
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  t.push_back(std::ldexp(1.0, bias + 1));
  return t;
}

// The nearest pattern to `x` (not NaN), ties to the even pattern.
uint16_t ReferenceRound(const Format& f, const std::vector<double>& table, double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= table.back()) return sign | InfBits(f);
  const size_t hi = std::upper_bound(table.begin(), table.end(), a) - table.begin();
  const size_t lo = hi - 1;
  if (table[lo] == a) return static_cast<uint16_t>(sign | lo);
  const double down = a - table[lo], up = table[hi] - a;
  size_t pick = down < up ? lo : up < down ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>(sign | pick);  // pick == InfBits for the last step: infinity
}

TEST(Half, EveryPatternDecodesExactlyAndRoundTrips) {
  for (const Format& f : kFormats) {
    int nans = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
      const auto bits = static_cast<uint16_t>(b);
      const float x = f.to_float(bits);
      const double want = Decode(f, bits);
      if (std::isnan(want)) {
        ++nans;
        ASSERT_TRUE(std::isnan(x)) << f.name << " " << b;
        ASSERT_EQ(std::signbit(x), (b >> 15) != 0) << f.name << " " << b;
      } else {
        ASSERT_EQ(static_cast<double>(x), want) << f.name << " " << b;
        ASSERT_EQ(std::signbit(x), std::signbit(want)) << f.name << " " << b;
      }
      ASSERT_EQ(f.from_float(x), bits) << f.name << " " << b;  // NaN payloads included
      // Through double a signalling NaN comes back quiet (the float -> double conversion
      // sets the quiet bit); every other pattern comes back as it was.
      const uint16_t via_double = f.from_double(static_cast<double>(x));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f.to_float(via_double))) << f.name << " " << b;
      } else {
        ASSERT_EQ(via_double, bits) << f.name << " " << b;
      }
    }
    EXPECT_EQ(nans, 2 * ((1 << f.mantissa_bits) - 1)) << f.name;
  }
}

TEST(Half, MidpointsTieToEvenAndTheirNeighboursRoundToTheNearest) {
  for (const Format& f : kFormats) {
    const std::vector<double> table = Table(f);
    int checked = 0;
    for (size_t i = 0; i + 1 < table.size(); ++i) {
      const double mid = (table[i] + table[i + 1]) / 2;  // exact in float32
      for (double x : {mid, -mid}) {
        const auto fx = static_cast<float>(x);
        ASSERT_EQ(static_cast<double>(fx), x);
        for (float y : {fx, std::nextafter(fx, 0.0f), std::nextafter(fx, 2 * fx)}) {
          ASSERT_EQ(f.from_float(y), ReferenceRound(f, table, y)) << f.name << " " << y;
          ++checked;
        }
        // Doubles just off the midpoint: a naive double -> float -> 2-byte conversion
        // rounds these twice and lands on the tie's even side.
        for (double d : {std::nextafter(x, 0.0), std::nextafter(x, 2 * x), x * (1 + 0x1p-40),
                         x * (1 - 0x1p-40)}) {
          ASSERT_EQ(f.from_double(d), ReferenceRound(f, table, d)) << f.name << " " << d;
        }
      }
    }
    EXPECT_GT(checked, 6 * 30000) << f.name;
  }
}

TEST(Half, RandomFloatsAndDoublesRoundToTheNearest) {
  std::mt19937_64 rng(7);
  for (const Format& f : kFormats) {
    const std::vector<double> table = Table(f);
    for (int i = 0; i < 300000; ++i) {
      const auto bits = static_cast<uint32_t>(rng());
      float x;
      std::memcpy(&x, &bits, sizeof x);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(f.to_float(f.from_float(x))));
        continue;
      }
      ASSERT_EQ(f.from_float(x), ReferenceRound(f, table, x)) << f.name << " " << x;
      // A double near the same magnitude, with bits below float32's precision.
      const double d = static_cast<double>(x) * (1 + std::ldexp(static_cast<double>(rng() % 1000), -45));
      if (std::isfinite(d)) {
        ASSERT_EQ(f.from_double(d), ReferenceRound(f, table, d)) << f.name << " " << d;
      }
    }
  }
}

TEST(Half, LimitsSubnormalsAndSignedZero) {
  EXPECT_EQ(FloatToFloat16Bits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16Bits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16Bits(65520.0f), 0x7c00);                // the tie rounds to infinity
  EXPECT_EQ(FloatToFloat16Bits(0x1p-24f), 0x0001);                  // the smallest subnormal
  EXPECT_EQ(FloatToFloat16Bits(0x1p-25f), 0x0000);                  // half of it: tie to even 0
  EXPECT_EQ(FloatToFloat16Bits(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToBFloat16Bits(0x1p-133f), 0x0001);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + 0x1p-8f), 0x3f80);          // tie to even (1.0)
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + 0x1.8p-8f), 0x3f81);
  EXPECT_EQ(DoubleToBFloat16Bits(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);  // not a tie in double
  EXPECT_EQ(DoubleToFloat16Bits(1e300), 0x7c00);
  EXPECT_EQ(DoubleToBFloat16Bits(-1e-300), 0x8000);
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(std::nanf("")))));
  EXPECT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
  EXPECT_EQ(Float16::FromBits(0x3c00).bits, 0x3c00);
  EXPECT_EQ(static_cast<float>(Float16::FromBits(0x3c00)), 1.0f);
}

}  // namespace
}  // namespace spmd
