// Index math shared by the references: arity and shape checks, row-major strides,
// multi-index iteration, axis normalisation, numpy broadcasting, and the
// (outer, axis, inner) view of a tensor along one dim.
//
// Everything here is plain and small on purpose: the references are the oracle, so
// their helpers must be obviously right rather than fast.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/tensor.h"
#include "rules/model/error.h"
#include "rules/model/attrs.h"
#include "rules/engine/shape_util.h"

namespace spmd::reference::internal {

// "inputs[i]" or "inputs[i].what".
inline std::string InputField(size_t i, const std::string& what = "") {
  std::string field = "inputs[" + std::to_string(i) + "]";
  return what.empty() ? field : field + "." + what;
}

inline std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Throws naming `field` unless every dim of `shape` is >= 0 and the product of its
// non-zero dims is at most 2^62, so that element counts and strides cannot overflow.
inline void CheckShape(const Shape& shape, const std::string& field) {
  constexpr int64_t kMaxElements = int64_t{1} << 62;
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d < 0) ThrowInvalid(field, "negative dim in " + ShapeToString(shape));
    if (d == 0) continue;
    if (product > kMaxElements / d)
      ThrowInvalid(field, "too many elements in " + ShapeToString(shape));
    product *= d;
  }
}

// Throws unless every dim is >= 0 and the data holds exactly NumElements(shape) values.
inline void CheckTensor(const Tensor& t, size_t i) {
  CheckShape(t.shape, InputField(i, "shape"));
  if (static_cast<int64_t>(t.data.size()) != NumElements(t.shape)) {
    ThrowInvalid(InputField(i, "data"), "has " + std::to_string(t.data.size()) + " values, shape " +
                                            ShapeToString(t.shape) + " needs " +
                                            std::to_string(NumElements(t.shape)));
  }
}

// Throws unless there are exactly `n` inputs, each well formed.
inline void CheckArity(const Tensors& inputs, size_t n) {
  if (inputs.size() != n) {
    ThrowInvalid("inputs",
                 "expected " + std::to_string(n) + " inputs, got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) CheckTensor(inputs[i], i);
}

// Throws unless there are at least `n` inputs, each well formed.
inline void CheckArityAtLeast(const Tensors& inputs, size_t n) {
  if (inputs.size() < n) {
    ThrowInvalid("inputs", "expected at least " + std::to_string(n) + " inputs, got " +
                               std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) CheckTensor(inputs[i], i);
}

inline int64_t Rank(const Tensor& t) { return static_cast<int64_t>(t.shape.size()); }

// The most elements one reference output may have (2 GiB of doubles): the references
// are an oracle for small tensors, and a larger request is refused rather than
// exhausting memory.
inline constexpr int64_t kMaxOutputElements = int64_t{1} << 28;

// Returns a zero-filled tensor of `shape`; Unsupported (field "outputs") beyond
// kMaxOutputElements.
inline Tensor Zeros(const Shape& shape, DType dtype = DType::kFloat64) {
  int64_t n = 1;
  for (int64_t d : shape) {
    n = (d != 0 && n > kMaxOutputElements / d) ? kMaxOutputElements + 1 : n * d;
  }
  if (n > kMaxOutputElements) {
    ThrowUnsupported("outputs", "an output of shape " + ShapeToString(shape) +
                                    " exceeds the reference's limit of 2^28 elements");
  }
  Tensor t;
  t.shape = shape;
  t.data.assign(static_cast<size_t>(NumElements(shape)), 0.0);
  t.dtype = dtype;
  return t;
}

// Row-major strides: strides[d] = prod(shape[d+1:]).
inline Shape Strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// The multi-index of flat position `flat` in `shape` (row-major).
inline std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 0) return index;
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

inline int64_t Dot(const std::vector<int64_t>& index, const Shape& strides) {
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * strides[d];
  return offset;
}

// The most output tensors one reference call may return (split_with_num, unbind).
inline constexpr int64_t kMaxOutputs = int64_t{1} << 16;

inline void CheckOutputCount(int64_t n) {
  if (n > kMaxOutputs) {
    ThrowUnsupported("outputs",
                     std::to_string(n) + " outputs exceed the reference's limit of 2^16");
  }
}

// Returns `axis` in [0, rank); negative counts from the end. Throws naming `field`.
// (The shared validation of rules/engine/shape_util.h.)
inline int64_t NormalizeAxis(int64_t axis, int64_t rank, const std::string& field) {
  return shape::NormalizeAxis(axis, rank, field);
}

// As NormalizeAxis, except that a 0-d tensor accepts axis 0 and -1 (as Paddle does): the
// tensor is then viewed as shape [1] along that axis. Returns 0 for a 0-d tensor.
inline int64_t NormalizeAxisOrScalar(int64_t axis, int64_t rank, const std::string& field) {
  if (rank == 0) {
    if (axis != 0 && axis != -1) {
      ThrowInvalid(field, "axis " + std::to_string(axis) + " out of range for a 0-d tensor");
    }
    return 0;
  }
  return NormalizeAxis(axis, rank, field);
}

// A tensor seen as [outer, len, inner] around one dim: element (o, a, i) is at
// (o * len + a) * inner + i. A 0-d tensor is [1, 1, 1].
struct AxisView {
  int64_t outer = 1;
  int64_t len = 1;
  int64_t inner = 1;
  int64_t At(int64_t o, int64_t a, int64_t i) const { return (o * len + a) * inner + i; }
};

inline AxisView ViewAlong(const Shape& shape, int64_t axis) {
  AxisView v;
  if (shape.empty()) return v;
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
  v.len = shape[axis];
  for (int64_t d = axis + 1; d < static_cast<int64_t>(shape.size()); ++d) v.inner *= shape[d];
  return v;
}

// numpy broadcasting of several shapes (right-aligned; each dim equal or 1). Throws
// naming `inputs[i].shape` of the first input that does not fit the others before it.
inline Shape BroadcastShapes(const std::vector<Shape>& shapes) {
  return shape::BroadcastShapes(shapes);  // the shared validation of rules/engine/shape_util.h
}

// The flat offset in a tensor of `in_shape` read at output multi-index `out_index` under
// broadcasting (in_shape right-aligned to the output; size-1 dims read index 0).
inline int64_t BroadcastOffset(const std::vector<int64_t>& out_index, const Shape& in_shape) {
  Shape strides = Strides(in_shape);
  size_t shift = out_index.size() - in_shape.size();
  int64_t offset = 0;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    int64_t i = in_shape[d] == 1 ? 0 : out_index[d + shift];
    offset += i * strides[d];
  }
  return offset;
}

}  // namespace spmd::reference::internal
