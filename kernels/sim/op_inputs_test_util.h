// Inputs for running an op on its declaration's examples (rules/engine/op_decl.h): values of
// each input's kind, and the attrs of a one-rank run. Shared by the sim device's tests
// (kernels/sim/sim_test.cc, runtime/testing/sim_device_communicator_test.cc). Test-only.
#pragma once

#include <optional>
#include <random>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/error.h"
#include "rules/engine/op_decl.h"

namespace spmd::kernels::sim::testing {

// Inputs of an example, of its value kinds (floats in `dtype`).
inline Tensors MakeInputs(const OpDecl& op, const std::vector<Shape>& shapes, const Attrs& attrs, DType dtype,
                          uint64_t seed) {
  std::vector<InputValues> kinds;
  try {
    kinds = op.InputValueKinds(RuleContext{shapes, attrs});
  } catch (const SpmdError&) {
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Tensors inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const InputValues kind = i < kinds.size() ? kinds[i] : InputValues{};
    const DType t_dtype = IsIntegerKind(kind.kind)        ? DType::kInt64
                          : kind.kind == ValueKind::kBool ? DType::kBool
                                                          : dtype;
    Tensor t(shapes[i], t_dtype);
    std::vector<double> values(static_cast<size_t>(t.numel()));
    for (double& v : values) {
      switch (kind.kind) {
        case ValueKind::kReal: v = -2.0 + 4.0 * unit(rng); break;
        case ValueKind::kPositive:
        case ValueKind::kBoxes: v = 0.1 + 1.9 * unit(rng); break;
        case ValueKind::kUnit: v = -0.9 + 1.8 * unit(rng); break;
        case ValueKind::kProbability: v = 0.05 + 0.9 * unit(rng); break;
        case ValueKind::kAboveOne: v = 1.1 + 1.9 * unit(rng); break;
        case ValueKind::kNonZero: v = (unit(rng) < 0.5 ? -1.0 : 1.0) * (0.5 + 1.5 * unit(rng)); break;
        case ValueKind::kBool: v = unit(rng) < kind.ones ? 1.0 : 0.0; break;
        case ValueKind::kNearOne: v = (unit(rng) < 0.5 ? -1.0 : 1.0) * (1.01 + 0.04 * unit(rng)); break;
        case ValueKind::kIndex: v = kind.bound > 0 ? static_cast<double>(rng() % kind.bound) : 0.0; break;
        case ValueKind::kCounts:
          v = kind.bound > 0 ? static_cast<double>(rng() % static_cast<uint64_t>(kind.bound + 1)) : 0.0;
          break;
        case ValueKind::kSmallInt:
          v = kind.bound > 0 ? static_cast<double>(static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * kind.bound + 1)) -
                                                   kind.bound)
                             : 0.0;
          break;
      }
    }
    ArrangeInputValues(kind, shapes[i], values);
    for (int64_t e = 0; e < t.numel(); ++e) {
      const double v = values[static_cast<size_t>(e)];
      switch (t_dtype) {
        case DType::kInt64: t.data<int64_t>()[e] = static_cast<int64_t>(v); break;
        case DType::kBool: t.data<bool>()[e] = v != 0; break;
        case DType::kFloat32: t.data<float>()[e] = static_cast<float>(v); break;
        case DType::kBFloat16: t.data<BFloat16>()[e] = BFloat16(static_cast<float>(v)); break;
        default: t.data<double>()[e] = v; break;
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// The attrs a one-rank run uses: normalised, then localized for the whole tensor.
inline std::optional<Attrs> WholeTensorAttrs(const OpDecl& op, const Example& example) {
  try {
    const Attrs attrs = op.NormalizeAttrs(example.attrs);
    if (!op.localize) return attrs;
    const std::vector<Shape> outs = InferOutputShapes(op, example.shapes, attrs);
    std::vector<Shape> offsets;
    for (const Shape& s : example.shapes) offsets.push_back(Shape(s.size(), 0));
    return op.localize(LocalContext{attrs, example.shapes, example.shapes, offsets, outs, outs});
  } catch (const SpmdError&) {
    return std::nullopt;
  }
}

}  // namespace spmd::kernels::sim::testing
