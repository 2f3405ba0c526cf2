// The per-dtype plumbing of the tolerance model (property_tests/tolerance.h): unit
// roundoffs, compute vs storage precision, and rounding to a dtype. The narrow floats are
// checked as soon as rules/model/dtype.h knows them ("bfloat16", "float16"); until then those
// tests are skipped, visibly.
#include "property_tests/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace spmd::prop {
namespace {

TEST(Tolerance, UnitRoundoffsOfTheDtypesThatExist) {
  EXPECT_EQ(UnitRoundoff(DType::kFloat64), 0x1p-53);
  EXPECT_EQ(UnitRoundoff(DType::kFloat32), 0x1p-24);
  EXPECT_EQ(UnitRoundoff(DType::kInt64), 0);
  EXPECT_EQ(UnitRoundoff(DType::kBool), 0);
  EXPECT_EQ(PrecisionOf(DType::kFloat32).compute_u, 0x1p-24);
  EXPECT_EQ(PrecisionOf(DType::kFloat32).storage_u, 0);
  EXPECT_EQ(PrecisionOf(DType::kFloat64).compute_u, 0x1p-53);
}

TEST(Tolerance, RoundingToFloat32IsTheCast) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> v(-4, 4);
  for (int k = 0; k < 1000; ++k) {
    const double x = v(rng) * std::ldexp(1.0, static_cast<int>(rng() % 300) - 150);
    EXPECT_EQ(RoundToDType(x, DType::kFloat32), static_cast<double>(static_cast<float>(x))) << x;
  }
}

// u: the dtype's unit roundoff; min_normal, max: its range.
void CheckNarrow(DType d, double u, double min_normal, double max) {
  EXPECT_EQ(UnitRoundoff(d), u);
  EXPECT_EQ(PrecisionOf(d).compute_u, 0x1p-24);  // the CPU kernels compute in float32
  EXPECT_EQ(PrecisionOf(d).storage_u, u);
  // Half the subnormals' spacing (2 u min_normal), the largest error of rounding a value
  // below the normal range.
  EXPECT_EQ(PrecisionOf(d).storage_abs, min_normal * u);
  EXPECT_EQ(RoundToDType(1 + u, d), 1.0);              // a tie goes to even
  EXPECT_EQ(RoundToDType(1 + 3 * u, d), 1 + 4 * u);    // a tie goes to even
  EXPECT_EQ(RoundToDType(1 + 1.1 * u, d), 1 + 2 * u);
  EXPECT_EQ(RoundToDType(-(1 + 1.1 * u), d), -(1 + 2 * u));
  EXPECT_EQ(RoundToDType(max, d), max);
  EXPECT_TRUE(std::isinf(RoundToDType(max * (1 + u), d)));
  // Below the normal range the spacing stays that of the smallest normal binade.
  const double spacing = min_normal * 2 * u;
  EXPECT_EQ(RoundToDType(0.75 * spacing, d), spacing);
  EXPECT_EQ(RoundToDType(0.25 * spacing, d), 0.0);
}

TEST(Tolerance, Bfloat16) {
  const std::optional<DType> d = ParseDType("bfloat16");
  if (!d) GTEST_SKIP() << "no bfloat16 dtype yet";
  CheckNarrow(*d, 0x1p-8, 0x1p-126, 0x1.fep127);
}

TEST(Tolerance, Float16) {
  const std::optional<DType> d = ParseDType("float16");
  if (!d) GTEST_SKIP() << "no float16 dtype yet";
  CheckNarrow(*d, 0x1p-11, 0x1p-14, 65504.0);
}

}  // namespace
}  // namespace spmd::prop
