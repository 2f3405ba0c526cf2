// The Highway loops of kernels/cpu/simd.h against float64 references, on every target this
// CPU runs (each one forced in turn through Highway's SetSupportedTargetsForTest), over
// generated lengths around the lane counts (0, 1, tails of every size up to 16 lanes past
// a multiple) and random values. Bounds: the exact ops equal the scalar float result bit
// for bit; exp within 2 ulp (vector_math.h's promise); the rest within the float32 bounds of
// their ops' tolerance classes (property_tests/tolerance.cc: the same formulas). Each loop
// must also leave the memory past its n untouched.
#include "kernels/cpu/simd.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace spmd::kernels::cpu {
namespace {

constexpr double kU = 0x1p-24;  // float32's unit roundoff
constexpr double kFloor = 1e-30;
constexpr float kSentinel = -12345.678f;

// Lengths: every n up to 70 (tails of every size at 4, 8 and 16 lanes, 0 and 1), then
// random ones up to 1100.
std::vector<int64_t> Lengths() {
  std::vector<int64_t> ns;
  for (int64_t n = 0; n <= 70; ++n) ns.push_back(n);
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) ns.push_back(std::uniform_int_distribution<int64_t>(71, 1100)(rng));
  return ns;
}

std::vector<float> Random(int64_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// An output buffer of n floats followed by 16 sentinels.
std::vector<float> Out(int64_t n) { return std::vector<float>(static_cast<size_t>(n) + 16, kSentinel); }

void ExpectTailUntouched(const std::vector<float>& out, int64_t n, const std::string& what) {
  for (size_t i = static_cast<size_t>(n); i < out.size(); ++i) {
    ASSERT_EQ(out[i], kSentinel) << what << ": wrote past n = " << n;
  }
}

double Ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity()) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Runs `body` once per target that this CPU supports and the build compiled, with that
// target forced; checks the dispatch really switched.
void ForEachTarget(const std::function<void(const std::string&)>& body) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = hwy::TargetName(target);
    EXPECT_EQ(std::string(simd::TargetName()), name);
    SCOPED_TRACE("target " + name);
    body(name);
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(SimdTest, EveryTargetIsReached) {
  std::vector<std::string> names;
  ForEachTarget([&](const std::string& name) { names.push_back(name); });
  std::string all;
  for (const std::string& n : names) all += n + " ";
  std::printf("targets: %s(dispatched by default: %s)\n", all.c_str(), simd::TargetName());
  EXPECT_GE(names.size(), 1u);
}

TEST(SimdTest, ArithmeticIsTheScalarRoundingBitForBit) {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(1);
    for (int64_t n : Lengths()) {
      const std::vector<float> x = Random(n, -1e3f, 1e3f, rng), y = Random(n, -1e3f, 1e3f, rng);
      const float b = std::uniform_real_distribution<float>(-5, 5)(rng);
      const float s = std::uniform_real_distribution<float>(-5, 5)(rng);
      struct Case {
        std::string name;
        std::function<void(float*)> run;
        std::function<float(size_t)> want;
      };
      const std::vector<Case> cases = {
          {"add", [&](float* o) { simd::Add(x.data(), y.data(), o, n); }, [&](size_t i) { return x[i] + y[i]; }},
          {"subtract", [&](float* o) { simd::Subtract(x.data(), y.data(), o, n); },
           [&](size_t i) { return x[i] - y[i]; }},
          {"multiply", [&](float* o) { simd::Multiply(x.data(), y.data(), o, n); },
           [&](size_t i) { return x[i] * y[i]; }},
          {"add_scalar", [&](float* o) { simd::AddScalar(x.data(), b, o, n); }, [&](size_t i) { return x[i] + b; }},
          {"multiply_scalar", [&](float* o) { simd::MultiplyScalar(x.data(), b, o, n); },
           [&](size_t i) { return x[i] * b; }},
          {"scale_after", [&](float* o) { simd::Scale(x.data(), s, b, true, o, n); },
           [&](size_t i) { return s * x[i] + b; }},
          {"scale_before", [&](float* o) { simd::Scale(x.data(), s, b, false, o, n); },
           [&](size_t i) { return s * (x[i] + b); }},
      };
      for (const Case& c : cases) {
        std::vector<float> out = Out(n);
        c.run(out.data());
        for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
          ASSERT_EQ(out[i], c.want(i)) << c.name << " n " << n << " at " << i;
        }
        ExpectTailUntouched(out, n, c.name);
      }
    }
  });
}

TEST(SimdTest, ExpWithinTwoUlpsAndSpecials) {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(2);
    for (int64_t n : Lengths()) {
      std::vector<float> x = Random(n, -87.0f, 88.5f, rng);
      std::vector<float> out = Out(n);
      simd::Exp(x.data(), out.data(), n);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        ASSERT_LE(Ulps(out[i], std::exp(static_cast<double>(x[i]))), 2.0) << "exp(" << x[i] << ")";
      }
      ExpectTailUntouched(out, n, "exp");
    }
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> special = {std::nanf(""), inf, -inf, 89.0f, -104.0f, 0.0f};
    std::vector<float> out(special.size());
    simd::Exp(special.data(), out.data(), static_cast<int64_t>(special.size()));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], inf);
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_EQ(out[3], inf);
    EXPECT_EQ(out[4], 0.0f);
    EXPECT_EQ(out[5], 1.0f);
  });
}

// gelu and gelu_grad: the pointwise class, (168 |ref| + 17) u.
TEST(SimdTest, GeluAndGeluGradWithinThePointwiseBound) {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(3);
    for (int64_t n : Lengths()) {
      const std::vector<float> x = Random(n, -9.0f, 9.0f, rng), g = Random(n, -3.0f, 3.0f, rng);
      std::vector<float> out = Out(n), grad = Out(n);
      simd::Gelu(x.data(), out.data(), n);
      simd::GeluGrad(x.data(), g.data(), grad.data(), n);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const double v = x[i];
        const double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
        const double ref = v * cdf;
        ASSERT_LE(std::fabs(out[i] - ref), (168 * std::fabs(ref) + 17) * kU) << "gelu(" << v << ")";
        const double slope = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
        const double gref = slope * g[i];
        ASSERT_LE(std::fabs(grad[i] - gref), (168 * std::fabs(gref) + 17) * kU)
            << "gelu_grad(" << v << ", " << g[i] << ")";
      }
      ExpectTailUntouched(out, n, "gelu");
      ExpectTailUntouched(grad, n, "gelu_grad");
    }
  });
}

// softmax: kRelative, 2 (K + 8 + 2 m) u |ref|; softmax_grad: kSoftmaxGrad,
// 2 (K + 8) u (|ref| + m (m + K m^2)).
TEST(SimdTest, SoftmaxRowsAndGradWithinTheirClassBounds) {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(4);
    for (int64_t len : Lengths()) {
      for (int64_t rows : {1, 3}) {
        const int64_t n = rows * len;
        const std::vector<float> x = Random(n, -8.0f, 8.0f, rng), g = Random(n, -2.0f, 2.0f, rng);
        std::vector<float> y = Out(n), dx = Out(n);
        simd::SoftmaxRows(x.data(), y.data(), rows, len);
        simd::SoftmaxGradRows(y.data(), g.data(), dx.data(), rows, len);
        const double k = static_cast<double>(len);
        for (int64_t r = 0; r < rows; ++r) {
          const size_t base = static_cast<size_t>(r * len);
          double m = -INFINITY, s = 0, dot = 0;
          for (int64_t j = 0; j < len; ++j) m = std::max(m, static_cast<double>(x[base + j]));
          for (int64_t j = 0; j < len; ++j) s += std::exp(x[base + j] - m);
          // softmax_grad's reference on the kernel's own softmax output (its input).
          for (int64_t j = 0; j < len; ++j) dot += static_cast<double>(g[base + j]) * y[base + j];
          for (int64_t j = 0; j < len; ++j) {
            const size_t i = base + static_cast<size_t>(j);
            const double ref = std::exp(x[i] - m) / s;
            ASSERT_LE(std::fabs(y[i] - ref), 2 * (k + 8 + 2 * 8) * kU * ref + kFloor)
                << "softmax len " << len << " at " << j;
            const double gref = y[i] * (g[i] - dot);
            const double mm = 2.0;  // max(1, |inputs|)
            ASSERT_LE(std::fabs(dx[i] - gref), 2 * (k + 8) * kU * (std::fabs(gref) + mm * (mm + k * mm * mm)) + kFloor)
                << "softmax_grad len " << len << " at " << j;
          }
        }
        ExpectTailUntouched(y, n, "softmax");
        ExpectTailUntouched(dx, n, "softmax_grad");
      }
    }
  });
}

// layer_norm (kLayerNorm) and layer_norm_grad (kLayerNormGrad), the formulas of
// property_tests/tolerance.cc.
TEST(SimdTest, LayerNormRowsAndGradWithinTheirClassBounds) {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(5);
    const float eps = 1e-5f;
    for (int64_t len : Lengths()) {
      if (len == 0) continue;  // the op refuses an empty row before any loop
      const int64_t rows = 3;
      const int64_t n = rows * len;
      const std::vector<float> x = Random(n, -4.0f, 4.0f, rng), g = Random(n, -2.0f, 2.0f, rng);
      const std::vector<float> scale = Random(len, -2.0f, 2.0f, rng), bias = Random(len, -2.0f, 2.0f, rng);
      std::vector<float> out = Out(n), mean = Out(rows), var = Out(rows);
      simd::LayerNormRows(x.data(), scale.data(), bias.data(), eps, rows, len, out.data(), mean.data(), var.data());
      std::vector<float> dx = Out(n), dscale(static_cast<size_t>(len) + 16, 0.0f), dbias(static_cast<size_t>(len) + 16, 0.0f);
      std::fill(dscale.begin() + len, dscale.end(), kSentinel);
      std::fill(dbias.begin() + len, dbias.end(), kSentinel);
      simd::LayerNormGradRows(x.data(), scale.data(), mean.data(), var.data(), g.data(), eps, rows, len,
                              dx.data(), dscale.data(), dbias.data());
      const double k = static_cast<double>(len), m = 4.0;
      std::vector<double> ds(static_cast<size_t>(len), 0.0), db(static_cast<size_t>(len), 0.0);
      std::vector<double> ds_mag(static_cast<size_t>(len), 0.0), db_mag(static_cast<size_t>(len), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const size_t base = static_cast<size_t>(r * len);
        double mu = 0, v = 0;
        for (int64_t j = 0; j < len; ++j) mu += x[base + j];
        mu /= k;
        for (int64_t j = 0; j < len; ++j) v += (x[base + j] - mu) * (x[base + j] - mu);
        v /= k;
        ASSERT_LE(std::fabs(mean[r] - mu), 2 * (k + 8) * kU * (std::fabs(mu) + m) + kFloor);
        ASSERT_LE(std::fabs(var[r] - v), 2 * (k + 8) * kU * v + 4 * (k * m * kU) * (k * m * kU) + kFloor);
        const double inv = 1 / std::sqrt(v + eps);
        for (int64_t j = 0; j < len; ++j) {
          const double ref = (x[base + j] - mu) * inv * scale[j] + bias[j];
          ASSERT_LE(std::fabs(out[base + j] - ref), 2 * (k + 8 + 2 * m) * kU * (std::fabs(ref) + 2 + inv * 2 * 3 * m) + kFloor)
              << "layer_norm len " << len << " row " << r << " at " << j;
        }
        // The gradient's reference from the kernel's own mean and variance (its inputs).
        const double ginv = 1 / std::sqrt(static_cast<double>(var[r]) + eps);
        double sd = 0, sdx = 0, ad = 0, adx = 0;
        std::vector<double> xhat(static_cast<size_t>(len)), dxhat(static_cast<size_t>(len));
        for (int64_t j = 0; j < len; ++j) {
          xhat[j] = (x[base + j] - static_cast<double>(mean[r])) * ginv;
          dxhat[j] = static_cast<double>(g[base + j]) * scale[j];
          sd += dxhat[j], sdx += dxhat[j] * xhat[j];
          ad += std::fabs(dxhat[j]), adx += std::fabs(dxhat[j] * xhat[j]);
          ds[j] += g[base + j] * xhat[j], db[j] += g[base + j];
          ds_mag[j] += std::fabs(g[base + j] * xhat[j]), db_mag[j] += std::fabs(g[base + j]);
        }
        for (int64_t j = 0; j < len; ++j) {
          const double ref = (dxhat[j] - sd / k - xhat[j] * sdx / k) * ginv;
          const double mag = ginv * (std::fabs(dxhat[j]) + ad / k + std::fabs(xhat[j]) * adx / k);
          ASSERT_LE(std::fabs(dx[base + j] - ref), 2 * (k + 20) * kU * mag + kFloor)
              << "layer_norm_grad len " << len << " row " << r << " at " << j;
        }
      }
      for (int64_t j = 0; j < len; ++j) {
        ASSERT_LE(std::fabs(dscale[j] - ds[j]), 2 * (rows + 20) * kU * ds_mag[j] + kFloor);
        ASSERT_LE(std::fabs(dbias[j] - db[j]), 2 * (rows + 20) * kU * db_mag[j] + kFloor);
      }
      ExpectTailUntouched(out, n, "layer_norm");
      ExpectTailUntouched(mean, rows, "layer_norm mean");
      ExpectTailUntouched(dx, n, "layer_norm_grad");
      ExpectTailUntouched(dscale, len, "layer_norm_grad scale_grad");
      ExpectTailUntouched(dbias, len, "layer_norm_grad bias_grad");
    }
  });
}

}  // namespace
}  // namespace spmd::kernels::cpu
