// What every op plan (rules/ops/*_plan.h) starts from: the inputs' shapes and the arity check,
// written once for the rules, the references (reference/) and the kernels (kernels/cpu/,
// kernels/cuda/). A plan takes the inputs' shapes and the op's attrs, reads the attrs,
// throws SpmdError naming the field at fault (the same kind and field on every backend)
// and returns the shapes and the index plan the loops need. Header-only; no value
// arithmetic, so the references stay an independent oracle for the kernels' values.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

using Shape = std::vector<int64_t>;
using Shapes = std::vector<Shape>;

// The shapes of `inputs`: kernels' tensors (t.shape()) or the references' (t.shape).
template <typename Inputs>
Shapes ShapesOf(const Inputs& inputs) {
  Shapes shapes;
  shapes.reserve(inputs.size());
  for (const auto& t : inputs) {
    if constexpr (requires { t.shape(); }) {
      shapes.push_back(t.shape());
    } else {
      shapes.push_back(t.shape);
    }
  }
  return shapes;
}

// Throws InvalidArgument ("inputs") unless there are exactly n inputs.
inline void CheckArity(const Shapes& shapes, size_t n) {
  if (shapes.size() != n) {
    ThrowInvalid("inputs", "expected " + std::to_string(n) + " inputs, got " + std::to_string(shapes.size()));
  }
}

inline void CheckArityAtLeast(const Shapes& shapes, size_t n) {
  if (shapes.size() < n) {
    ThrowInvalid("inputs", "expected at least " + std::to_string(n) + " inputs, got " + std::to_string(shapes.size()));
  }
}

// Throws InvalidArgument ("inputs[i].shape") unless shapes[i] == want; `what` names the
// input and `rule` the expected shape in the message.
inline void CheckShapeIs(const Shapes& shapes, size_t i, const Shape& want, const std::string& what) {
  if (shapes[i] != want) {
    ThrowInvalid(shape::InputField(i, "shape"),
                 what + " must be " + shape::ShapeString(want) + ", got " + shape::ShapeString(shapes[i]));
  }
}

// Ids and labels read from a float tensor must be whole numbers of at most 9e15 in
// magnitude (exact in a double; the cast stays defined). The error for a value `v` that is
// not (the kernels check on their device and report the first bad value here).
[[noreturn]] inline void ThrowBadFloatId(const std::string& field, double v) {
  if (!std::isfinite(v) || v != std::trunc(v)) {
    ThrowInvalid(field, "id " + std::to_string(v) + " is not an integer");
  }
  ThrowInvalid(field, "id " + std::to_string(v) + " is out of range");
}
inline int64_t FloatId(double v, const std::string& field) {
  if (!std::isfinite(v) || v != std::trunc(v) || std::fabs(v) > 9.0e15) ThrowBadFloatId(field, v);
  return static_cast<int64_t>(v);
}

// The error of an id (or label, `noun`) outside [0, limit).
[[noreturn]] inline void ThrowIdOutside(const std::string& field, const std::string& noun, int64_t id,
                                        int64_t limit) {
  ThrowInvalid(field, noun + " " + std::to_string(id) + " outside [0, " + std::to_string(limit) + ")");
}

}  // namespace spmd::plan
