// The float32 exp and erf of kernels/cpu/vector_math.h against libm's double precision,
// over a dense sweep of floats (every 97th bit pattern of the range that matters, and the
// special values), with the accuracy the header promises.
#include "kernels/cpu/vector_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace spmd::kernels::cpu {
namespace {

// Units in the last place of float between `got` and the exact `want`.
double Ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity()) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Every 97th float from `lo` to `hi` (both finite, lo < hi), by bit pattern order.
template <typename F>
void Sweep(float lo, float hi, F&& check) {
  for (float x = lo; x < hi;) {
    check(x);
    const uint32_t bits = std::bit_cast<uint32_t>(x);  // unsigned: the steps never overflow
    // Walk the bit patterns: up for positives, down (toward -0) for negatives.
    const float next = x < 0 ? std::bit_cast<float>(bits - 97u) : std::bit_cast<float>(bits + 97u);
    x = (x < 0 && next >= 0) ? 0.0f : next;
  }
}

TEST(VectorMathTest, ExpWithinTwoUlpsWhereNormal) {
  double worst = 0;
  float at = 0;
  Sweep(-87.0f, 88.7f, [&](float x) {
    const double u = Ulps(ExpF(x), std::exp(static_cast<double>(x)));
    if (u > worst) worst = u, at = x;
  });
  std::printf("exp: worst %.3g ulp at %.9g\n", worst, at);
  EXPECT_LE(worst, 2.0) << "at x = " << at;
}

TEST(VectorMathTest, ExpAtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(89.0f), inf);
  EXPECT_EQ(ExpF(1000.0f), inf);
  EXPECT_EQ(ExpF(inf), inf);
  EXPECT_EQ(ExpF(-inf), 0.0f);
  EXPECT_EQ(ExpF(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isnan(ExpF(std::numeric_limits<float>::quiet_NaN())));
  // Subnormal results: within one subnormal step of the exact value.
  for (float x = -103.0f; x < -87.5f; x += 0.37f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_LE(std::fabs(ExpF(x) - want), std::numeric_limits<float>::denorm_min()) << x;
  }
}

TEST(VectorMathTest, ErfWithinItsBound) {
  double worst_abs = 0, worst_small_rel = 0;
  float at_abs = 0, at_rel = 0;
  Sweep(-10.0f, 10.0f, [&](float x) {
    const double want = std::erf(static_cast<double>(x));
    const double err = std::fabs(ErfF(x) - want);
    if (err > worst_abs) worst_abs = err, at_abs = x;
    // Relative where the result is a normal float (a subnormal has fewer digits).
    if (std::fabs(x) < 0.5f && std::fabs(want) >= std::numeric_limits<float>::min() &&
        err / std::fabs(want) > worst_small_rel) {
      worst_small_rel = err / std::fabs(want), at_rel = x;
    }
  });
  std::printf("erf: worst absolute error %.3g at %.9g, worst relative below 0.5 %.3g at %.9g\n",
              worst_abs, at_abs, worst_small_rel, at_rel);
  EXPECT_LE(worst_abs, 4e-7) << "at x = " << at_abs;
  EXPECT_LE(worst_small_rel, 2.5e-7) << "at x = " << at_rel;
}

TEST(VectorMathTest, ErfAtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ErfF(inf), 1.0f);
  EXPECT_EQ(ErfF(-inf), -1.0f);
  EXPECT_EQ(ErfF(30.0f), 1.0f);
  EXPECT_EQ(ErfF(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(ErfF(-0.0f)));
  EXPECT_TRUE(std::isnan(ErfF(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace spmd::kernels::cpu
