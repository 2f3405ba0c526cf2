// The element conversions of the CUDA kernels (kernels/cuda/convert.h), run on the host:
// CastElement against the CPU's cast kernel for every dtype pair (bit for bit), ValueAs
// against the CPU's reading of value inputs, FillBits against CpuBackend::Fill.
#include "kernels/cuda/convert.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/tensor.h"
#include "rules/model/error.h"

namespace spmd::kernels::cuda {
namespace {

constexpr DType kAll[] = {DType::kFloat64, DType::kFloat32, DType::kInt64,
                          DType::kBool,    DType::kBFloat16, DType::kFloat16};

template <class F>
void Visit(DType d, F&& f) {
  switch (d) {
    case DType::kFloat64: f(double{}); return;
    case DType::kFloat32: f(float{}); return;
    case DType::kInt64: f(int64_t{}); return;
    case DType::kBool: f(bool{}); return;
    case DType::kBFloat16: f(BFloat16{}); return;
    case DType::kFloat16: f(Float16{}); return;
  }
}

// A double with an interesting spread: specials, halfway points of the narrow types,
// float32's edge, int64's edge, subnormals, plain values.
double AnyDouble() {
  const int kind = *rc::gen::inRange(0, 8);
  switch (kind) {
    case 0:
      return *rc::gen::element<double>(0.0, -0.0, std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::infinity(),
                                        std::numeric_limits<double>::quiet_NaN(), 65504.0, 65520.0,
                                        3.4028234663852886e38, 3.4028235677973366e38, 9223372036854775807.0,
                                        -9223372036854775808.0, 1e-45, 5.960464477539063e-08, 0.5, -2.5);
    case 1: {
      uint64_t bits = *rc::gen::arbitrary<uint64_t>();
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case 2: return std::ldexp(static_cast<double>(*rc::gen::inRange<int64_t>(-(1 << 20), 1 << 20)),
                              *rc::gen::inRange(-40, 40));
    case 3: return static_cast<double>(*rc::gen::arbitrary<int64_t>());
    case 4: {  // near float32's range edge
      return std::ldexp(1.0 + static_cast<double>(*rc::gen::inRange(0, 1 << 24)) * 0x1p-24, 127) *
             (*rc::gen::arbitrary<bool>() ? 1 : -1);
    }
    default: return static_cast<double>(*rc::gen::inRange(-1000, 1000)) / 8.0;
  }
}

// `count` values of dtype `d` in a host tensor.
Tensor RandomTensor(DType d, int64_t count) {
  Tensor t = Tensor::Uninitialized({count}, d);
  Visit(d, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < count; ++i) {
      const double v = AnyDouble();
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = *rc::gen::arbitrary<bool>();
      } else if constexpr (std::is_same_v<T, int64_t>) {
        p[i] = *rc::gen::oneOf(rc::gen::arbitrary<int64_t>(), rc::gen::inRange<int64_t>(-5, 5));
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        p[i] = BFloat16::FromBits(*rc::gen::arbitrary<uint16_t>());
      } else if constexpr (std::is_same_v<T, Float16>) {
        p[i] = Float16::FromBits(*rc::gen::arbitrary<uint16_t>());
      } else if constexpr (std::is_same_v<T, float>) {
        p[i] = SaturateToFloat(v);
      } else {
        p[i] = v;
      }
    }
  });
  return t;
}

template <class T>
bool SameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

RC_GTEST_PROP(CastElement, MatchesTheCpuCastKernelBitForBit, ()) {
  const DType from = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const DType to = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const Tensor x = RandomTensor(from, *rc::gen::inRange<int64_t>(1, 40));
  Attrs attrs;
  attrs.Set("dtype", std::string(ToString(to)));
  // The CPU refuses a cast to int64 of values int64 cannot hold; CastFitsInt64 must say
  // which.
  bool fits = true;
  Visit(from, [&](auto s) {
    using S = decltype(s);
    for (int64_t i = 0; i < x.numel(); ++i) fits = fits && (to != DType::kInt64 || std::is_same_v<S, int64_t> ||
                                                            std::is_same_v<S, bool> || CastFitsInt64(AsDouble(x.data<S>()[i])));
  });
  if (!fits) {
    try {
      RunCpuKernel("cast", {x}, attrs);
      RC_FAIL("the CPU cast accepted a value CastFitsInt64 refuses");
    } catch (const SpmdError& e) {
      RC_ASSERT(e.field() == "inputs[0].data");
    }
    return;
  }
  const Tensor want = RunCpuKernel("cast", {x}, attrs)[0];
  RC_ASSERT(want.dtype() == to);
  Visit(from, [&](auto s) {
    using S = decltype(s);
    Visit(to, [&](auto d) {
      using D = decltype(d);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const D got = CastElement<D>(x.data<S>()[i]);
        RC_ASSERT(SameBits(got, want.data<D>()[i]));
      }
    });
  });
}

TEST(CastElement, Int64Range) {
  EXPECT_TRUE(CastFitsInt64(-9223372036854775808.0));
  EXPECT_FALSE(CastFitsInt64(9223372036854775808.0));
  EXPECT_TRUE(CastFitsInt64(9223372036854774784.0));  // the largest double below 2^63
  EXPECT_FALSE(CastFitsInt64(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(CastFitsInt64(-std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(CastFitsInt64(-0.99));
  EXPECT_EQ(CastElement<int64_t>(-2.9), -2);
  EXPECT_EQ(CastElement<int64_t>(true), 1);
}

TEST(CastElement, FloatSaturatesAsRoundToNearest) {
  EXPECT_EQ(SaturateToFloat(3.4028235677973366e38), std::numeric_limits<float>::infinity());  // halfway: even
  EXPECT_EQ(SaturateToFloat(3.4028235677973362e38), std::numeric_limits<float>::max());
  EXPECT_EQ(SaturateToFloat(-1e300), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(SaturateToFloat(std::numeric_limits<double>::quiet_NaN())));
  // int64 -> float32 goes through double (two roundings), as the CPU's cast does.
  const int64_t v = (int64_t{1} << 62) + (int64_t{1} << 38) + 1;
  EXPECT_EQ(CastElement<float>(v), static_cast<float>(static_cast<double>(v)));
}

// ValueAs is how the elementwise kernels read value inputs: the CPU's ValuesAs<T> (a plain
// static_cast; int64 -> float rounds once), a 2-byte float as its float32 value. Checked
// through the CPU's add of the value and a zero of the compute dtype.
RC_GTEST_PROP(ValueAs, ReadsValueInputsAsTheCpuKernelsDo, ()) {
  const DType from = *rc::gen::element(DType::kInt64, DType::kBool);
  const DType compute = *rc::gen::element(DType::kFloat32, DType::kFloat64);
  const Tensor x = RandomTensor(from, *rc::gen::inRange<int64_t>(1, 40));
  const Tensor zero(Shape{1}, compute);
  const Tensor want = RunCpuKernel("add", {x, zero}, Attrs{})[0];
  Visit(from, [&](auto s) {
    using S = decltype(s);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (compute == DType::kFloat32) {
        RC_ASSERT(SameBits(ValueAs<float>(x.data<S>()[i]) + 0.0f, want.data<float>()[i]));
      } else {
        RC_ASSERT(SameBits(ValueAs<double>(x.data<S>()[i]) + 0.0, want.data<double>()[i]));
      }
    }
  });
  const BFloat16 h = BFloat16::FromBits(0x3fc0);  // 1.5
  RC_ASSERT(ValueAs<double>(h) == 1.5);
}

TEST(ConditionOf, NonzeroIncludingNaNIsTrue) {
  EXPECT_FALSE(ConditionOf(BFloat16::FromBits(0x8000)));  // -0
  EXPECT_TRUE(ConditionOf(BFloat16::FromBits(0x7fc0)));   // NaN
  EXPECT_TRUE(ConditionOf(Float16::FromBits(0x0001)));    // the smallest subnormal
  EXPECT_TRUE(ConditionOf(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(ConditionOf(-0.0f));
  EXPECT_TRUE(ConditionOf(int64_t{-3}));
}

TEST(FillBits, MatchesTheCpuBackendFill) {
  for (DType d : kAll) {
    for (double value : {0.0, 1.0, -1.0, 0.5, 3.0, -0.0}) {
      Tensor t = Tensor::Uninitialized({3}, d);
      CpuBackend().Fill(t.bytes(), 3, d, value, Stream{});
      const uint64_t bits = FillBits(d, value);
      const size_t size = static_cast<size_t>(ElementSize(d));
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(std::memcmp(t.bytes() + i * size, &bits, size), 0)
            << ToString(d) << " " << value;
      }
    }
  }
}

}  // namespace
}  // namespace spmd::kernels::cuda
