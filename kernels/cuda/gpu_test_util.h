// Shared by the GPU tests of kernels/cuda (they skip, with the reason, without a GPU):
// device tensors from host ones, comparison of a device result with the CPU's.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda.h"
#include "kernels/tensor.h"
#include "rules/model/error.h"

namespace spmd::kernels::cuda::testing {

// Skips the test (GTEST_SKIP, with DeviceCount's reason) when there is no GPU; else makes
// sure the backend is registered.
#define SPMD_REQUIRE_GPU()                                                       \
  do {                                                                           \
    std::string spmd_why_;                                                       \
    if (::spmd::kernels::cuda::DeviceCount(&spmd_why_) == 0) GTEST_SKIP() << spmd_why_; \
    ::spmd::kernels::cuda::EnableCuda();                                         \
  } while (0)

// A RapidCheck property that needs a GPU: a gtest TEST that skips without one and else
// checks the body (generators and RC_ASSERT inside, as in RC_GTEST_PROP).
#define SPMD_GPU_PROP(suite, name)                                                   \
  void suite##_##name##_Property();                                                 \
  TEST(suite, name) {                                                               \
    SPMD_REQUIRE_GPU();                                                             \
    EXPECT_TRUE(rc::check(#suite "." #name, &suite##_##name##_Property));           \
  }                                                                                 \
  void suite##_##name##_Property()

inline Tensor OnGpu(const Tensor& host) { return ToDevice(host, Device::Cuda(0)); }

template <class F>
void VisitDType(DType d, F&& f) {
  switch (d) {
    case DType::kFloat64: f(double{}); return;
    case DType::kFloat32: f(float{}); return;
    case DType::kInt64: f(int64_t{}); return;
    case DType::kBool: f(bool{}); return;
    case DType::kBFloat16: f(BFloat16{}); return;
    case DType::kFloat16: f(Float16{}); return;
  }
}

// Element i of a host tensor as a double (int64 beyond 2^53 rounds; the tests compare
// int64 results through Bits instead).
inline double ElementAsDouble(const Tensor& t, int64_t i) {
  double v = 0;
  VisitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    v = AsDouble(t.data<T>()[i]);
  });
  return v;
}

// How close a device result must be to the CPU's: `exact` (equal, or both NaN), else
// |got - want| <= rtol * max(|got|, |want|) + atol (infinities and NaNs must match).
struct Tolerance {
  bool exact = true;
  double rtol = 0;
  double atol = 0;
};

// "" when `got` (a host copy of the device result) matches `want`; else what differs.
inline std::string Mismatch(const Tensor& want, const Tensor& got, const Tolerance& tol) {
  if (want.dtype() != got.dtype()) {
    return std::string("dtype ") + std::string(ToString(got.dtype())) + ", want " + std::string(ToString(want.dtype()));
  }
  if (want.shape() != got.shape()) return "shape " + ShapeToString(got.shape()) + ", want " + ShapeToString(want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (want.dtype() == DType::kInt64) {
      if (want.data<int64_t>()[i] != got.data<int64_t>()[i]) {
        return "element " + std::to_string(i) + ": " + std::to_string(got.data<int64_t>()[i]) + ", want " +
               std::to_string(want.data<int64_t>()[i]);
      }
      continue;
    }
    const double w = ElementAsDouble(want, i), g = ElementAsDouble(got, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (w == g) continue;
    bool ok = false;
    if (!tol.exact && std::isfinite(w) && std::isfinite(g)) {
      ok = std::fabs(g - w) <= tol.rtol * std::fmax(std::fabs(g), std::fabs(w)) + tol.atol;
    }
    if (!ok) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %lld of %lld: %.17g, want %.17g", static_cast<long long>(i),
                    static_cast<long long>(want.numel()), g, w);
      return buf;
    }
  }
  return "";
}

// Runs `cpu` and `gpu`; "" when both refuse with the same error type and field, or both
// succeed and `same` accepts the results.
inline std::string SameOutcome(const std::function<Tensors()>& cpu, const std::function<Tensors()>& gpu,
                               const std::function<std::string(const Tensors&, const Tensors&)>& same) {
  std::optional<SpmdError> cpu_error, gpu_error;
  Tensors want, got;
  try {
    want = cpu();
  } catch (const SpmdError& e) {
    cpu_error = e;
  }
  try {
    got = gpu();
  } catch (const SpmdError& e) {
    gpu_error = e;
  }
  if (cpu_error || gpu_error) {
    if (!cpu_error) return std::string("the GPU refused (") + gpu_error->what() + "), the CPU did not";
    if (!gpu_error) return std::string("the CPU refused (") + cpu_error->what() + "), the GPU did not";
    if (cpu_error->type() != gpu_error->type() || cpu_error->field() != gpu_error->field()) {
      return std::string("GPU error '") + gpu_error->what() + "', CPU error '" + cpu_error->what() + "'";
    }
    return "";
  }
  return same(want, got);
}

}  // namespace spmd::kernels::cuda::testing
