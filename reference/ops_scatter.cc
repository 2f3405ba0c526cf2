// Index-driven reads and writes (docs/OPS.md "Paddle's other registered ops"): gather_nd,
// scatter, scatter_nd_add. Plain loops over multi-indices, from the definitions.
#include <cmath>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;

// `v` as an integral id in [0, bound) (bound < 0: no upper bound), or throws naming `field`.
int64_t Id(double v, int64_t bound, const std::string& field) {
  if (!std::isfinite(v) || v != std::trunc(v)) {
    ThrowInvalid(field, "id " + std::to_string(v) + " is not an integer");
  }
  if (v < 0 || (bound >= 0 && v >= static_cast<double>(bound))) {
    ThrowInvalid(field, "id " + std::to_string(v) + " outside [0, " + std::to_string(bound) + ")");
  }
  return static_cast<int64_t>(v);
}

// The depth K of an index `..., K` into x (K <= rank(x)); throws naming inputs[1].shape.
int64_t Depth(const Tensor& x, const Tensor& index) {
  if (index.shape.empty()) ThrowInvalid(InputField(1, "shape"), "index must have rank >= 1");
  const int64_t depth = index.shape.back();
  if (depth > internal::Rank(x)) {
    ThrowInvalid(InputField(1, "shape"), "index " + ShapeToString(index.shape) +
                                             " addresses more dims than x " + ShapeToString(x.shape));
  }
  return depth;
}

// The flat offset in x of the slice addressed by index row `row` (depth K), each id checked
// against x's dim.
int64_t SliceOffset(const Tensor& x, const Tensor& index, int64_t row, int64_t depth) {
  const Shape strides = internal::Strides(x.shape);
  int64_t offset = 0;
  for (int64_t j = 0; j < depth; ++j) {
    offset += Id(index.data[row * depth + j], x.shape[j], InputField(1, "data")) * strides[j];
  }
  return offset;
}

}  // namespace

// out[b..., t...] = x[index[b..., 0], ..., index[b..., K-1], t...].
Tensors gather_nd(const Tensors& inputs, const Attrs&) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const int64_t depth = Depth(x, index);
  const Shape batch(index.shape.begin(), index.shape.end() - 1);
  const Shape tail(x.shape.begin() + depth, x.shape.end());
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), tail.begin(), tail.end());
  Tensor out = internal::Zeros(out_shape, x.dtype);
  const int64_t slice = NumElements(tail);
  for (int64_t r = 0; r < NumElements(batch); ++r) {
    const int64_t offset = SliceOffset(x, index, r, depth);
    for (int64_t t = 0; t < slice; ++t) out.data[r * slice + t] = x.data[offset + t];
  }
  return {out};
}

// out = x; overwrite: out[index[i]] = updates[i] in order; else the rows named are zeroed
// and then every update added to its row. Localized (__vocab_start): x holds rows
// [start, start + rows); updates for other rows are skipped.
Tensors scatter(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const bool overwrite = attrs.GetBool("overwrite");
  if (x.shape.empty()) ThrowInvalid(InputField(0, "shape"), "x must have rank >= 1");
  if (index.shape.size() != 1) ThrowInvalid(InputField(1, "shape"), "index must be 1-D");
  Shape expected = x.shape;
  expected[0] = index.shape[0];
  if (updates.shape != expected) {
    ThrowInvalid(InputField(2, "shape"), "updates " + ShapeToString(updates.shape) + " must be " +
                                             ShapeToString(expected));
  }
  const bool sharded = attrs.Has(internal::kLocalVocabStart);
  const int64_t start = sharded ? attrs.GetInt(internal::kLocalVocabStart) : 0;
  if (start < 0) ThrowInvalid(std::string("attrs.") + internal::kLocalVocabStart, "negative row offset");
  const int64_t rows = x.shape[0];
  const int64_t row = NumElements(x.shape) / std::max<int64_t>(rows, 1);
  std::vector<int64_t> ids;
  for (double v : index.data) ids.push_back(Id(v, sharded ? -1 : rows, InputField(1, "data")));
  Tensor out = x;
  out.dtype = x.dtype;
  if (!overwrite) {
    for (int64_t id : ids) {
      if (id < start || id - start >= rows) continue;
      for (int64_t t = 0; t < row; ++t) out.data[(id - start) * row + t] = 0.0;
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < start || id - start >= rows) continue;  // another shard's row
    for (int64_t t = 0; t < row; ++t) {
      double& dst = out.data[(id - start) * row + t];
      const double u = updates.data[static_cast<int64_t>(i) * row + t];
      dst = overwrite ? u : dst + u;
    }
  }
  return {out};
}

// out = x, then out[index[b..., :], t...] += updates[b..., t...] for every b.
Tensors scatter_nd_add(const Tensors& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const int64_t depth = Depth(x, index);
  Shape expected(index.shape.begin(), index.shape.end() - 1);
  expected.insert(expected.end(), x.shape.begin() + depth, x.shape.end());
  if (updates.shape != expected) {
    ThrowInvalid(InputField(2, "shape"), "updates " + ShapeToString(updates.shape) + " must be " +
                                             ShapeToString(expected));
  }
  const int64_t batch = NumElements(Shape(index.shape.begin(), index.shape.end() - 1));
  const int64_t slice = NumElements(Shape(x.shape.begin() + depth, x.shape.end()));
  Tensor out = x;
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t offset = SliceOffset(x, index, r, depth);
    for (int64_t t = 0; t < slice; ++t) out.data[offset + t] += updates.data[r * slice + t];
  }
  return {out};
}

}  // namespace spmd::reference::ops
