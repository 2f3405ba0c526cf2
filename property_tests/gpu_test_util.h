// Shared by the GPU property tests (property_tests/gpu_*): whether a GPU is usable, the
// ops under test, and inputs of an op's value kinds as kernel_properties_test.cc makes them.
// Test-only; include from one .cc per program.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "kernels/tensor.h"
#include "property_tests/tolerance.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/half.h"
#include "rules/engine/registry.h"

namespace spmd::gpu_test {

namespace ref = reference;
using KTensor = kernels::Tensor;
using KTensors = kernels::Tensors;

// "" when a GPU is usable, else why not.
inline const std::string& NoGpuReason() {
  static const std::string reason = [] {
    std::string why;
    if (kernels::cuda::DeviceCount(&why) > 0) {
      try {
        kernels::cuda::EnableCuda();
        return std::string();
      } catch (const std::exception& e) {
        return std::string("the CUDA backend cannot start: ") + e.what();
      }
    }
    return "no usable GPU (" + (why.empty() ? std::string("no CUDA device") : why) + ")";
  }();
  return reason;
}

#define SPMD_REQUIRE_GPU()                                        \
  do {                                                            \
    if (!::spmd::gpu_test::NoGpuReason().empty()) GTEST_SKIP() << ::spmd::gpu_test::NoGpuReason(); \
  } while (0)

inline std::vector<std::string> OpsUnderTest() {
  std::set<std::string> only;
  if (const char* env = std::getenv("SPMD_KERNEL_OPS")) {
    std::stringstream ss(env);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (!name.empty()) only.insert(name);
    }
  }
  std::vector<std::string> names;
  for (const OpDecl& op : AllOps()) {
    if (only.empty() || only.count(op.name)) names.push_back(op.name);
  }
  return names;
}

// ---- Tensors ---------------------------------------------------------------------------------

inline KTensor ToKernel(const ref::Tensor& t, DType dtype) {
  KTensor k(t.shape, dtype);
  const size_t n = t.data.size();
  for (size_t i = 0; i < n; ++i) {
    const double v = t.data[i];
    switch (dtype) {
      case DType::kFloat64: k.data<double>()[i] = v; break;
      case DType::kFloat32: k.data<float>()[i] = static_cast<float>(v); break;
      case DType::kInt64: k.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::kBool: k.data<bool>()[i] = v != 0.0; break;
      case DType::kBFloat16: k.data<BFloat16>()[i] = BFloat16::FromBits(DoubleToBFloat16Bits(v)); break;
      case DType::kFloat16: k.data<Float16>()[i] = Float16::FromBits(DoubleToFloat16Bits(v)); break;
    }
  }
  return k;
}

inline std::vector<double> ValuesOf(const KTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat64: v[i] = t.data<double>()[i]; break;
      case DType::kFloat32: v[i] = t.data<float>()[i]; break;
      case DType::kInt64: v[i] = static_cast<double>(t.data<int64_t>()[i]); break;
      case DType::kBool: v[i] = t.data<bool>()[i] ? 1.0 : 0.0; break;
      case DType::kBFloat16: v[i] = static_cast<float>(t.data<BFloat16>()[i]); break;
      case DType::kFloat16: v[i] = static_cast<float>(t.data<Float16>()[i]); break;
    }
  }
  return v;
}

// Inputs of the op's value kinds; float inputs hold values of `run` exactly (2-byte runs:
// float32 values rounded to the 2-byte type). The reference tensors say float64 / float32.
inline ref::Tensors MakeInputs(const OpDecl& op, const std::vector<Shape>& shapes, const Attrs& attrs,
                        DType run, uint64_t seed) {
  std::vector<InputValues> kinds;
  const bool arity = op.variadic_inputs ? !shapes.empty() : shapes.size() == op.inputs.size();
  if (arity) {
    try {
      if (op.einsum) BuildEinsumSpec(op, shapes, attrs);
      kinds = op.InputValueKinds(RuleContext{shapes, attrs});
    } catch (const SpmdError&) {
      kinds.clear();
    }
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  ref::Tensors inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const InputValues kind = i < kinds.size() ? kinds[i] : InputValues{};
    ref::Tensor t;
    t.shape = shapes[i];
    t.dtype = run == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    t.data.resize(static_cast<size_t>(prop::Numel(t.shape)));
    for (double& v : t.data) {
      switch (kind.kind) {
        case ValueKind::kReal: v = -2.0 + 4.0 * unit(rng); break;
        case ValueKind::kPositive:
        case ValueKind::kBoxes: v = 0.1 + 1.9 * unit(rng); break;
        case ValueKind::kUnit: v = -0.9 + 1.8 * unit(rng); break;
        case ValueKind::kProbability: v = 0.05 + 0.9 * unit(rng); break;
        case ValueKind::kAboveOne: v = 1.1 + 1.9 * unit(rng); break;
        case ValueKind::kNonZero: v = (unit(rng) < 0.5 ? -1.0 : 1.0) * (0.5 + 1.5 * unit(rng)); break;
        case ValueKind::kBool: v = unit(rng) < 0.5 ? 0.0 : 1.0; break;
        case ValueKind::kNearOne:
          v = (unit(rng) < 0.5 ? -1.0 : 1.0) *
              std::exp((unit(rng) < 0.5 ? -1.0 : 1.0) * (0.01 + 0.05 * unit(rng)));
          break;
        case ValueKind::kIndex:
          v = kind.bound > 0 ? static_cast<double>(rng() % static_cast<uint64_t>(kind.bound)) : 0.0;
          break;
        case ValueKind::kCounts:
          v = kind.bound > 0 ? static_cast<double>(rng() % static_cast<uint64_t>(kind.bound + 1)) : 0.0;
          break;
        case ValueKind::kSmallInt:
          v = kind.bound > 0 ? static_cast<double>(static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * kind.bound + 1)) -
                                                   kind.bound)
                             : 0.0;
          break;
      }
      // Ids stay whole numbers of their own dtype (int64 below): a float16 run must not
      // round an id of 2^20 to infinity.
      if (!IsIntegerKind(kind.kind)) v = prop::RoundToDType(v, run);
    }
    ArrangeInputValues(kind, t.shape, t.data);
    if (kind.kind == ValueKind::kBool) t.dtype = DType::kBool;
    if (IsIntegerKind(kind.kind)) t.dtype = DType::kInt64;
    inputs.push_back(std::move(t));
  }
  return inputs;
}

}  // namespace spmd::gpu_test
