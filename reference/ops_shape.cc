// Shape ops (docs/OPS.md "Shape ops"). They only move values, so every output keeps
// the dtype of x (of the first input for concat and stack).
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"

namespace spmd::reference::ops {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;

// x with its data reinterpreted under `shape` (same element count, row-major).
Tensor Reshaped(const Tensor& x, const Shape& shape) {
  Tensor out = x;
  out.shape = shape;
  return out;
}

// The elements [start, start + len) of x along `axis` (x.shape[axis] becomes len).
Tensor TakeRange(const Tensor& x, int64_t axis, int64_t start, int64_t len) {
  AxisView in = internal::ViewAlong(x.shape, axis);
  Shape shape = x.shape;
  shape[axis] = len;
  Tensor out = internal::Zeros(shape, x.dtype);
  AxisView ov = internal::ViewAlong(shape, axis);
  for (int64_t o = 0; o < in.outer; ++o) {
    for (int64_t a = 0; a < len; ++a) {
      for (int64_t i = 0; i < in.inner; ++i) {
        out.data[ov.At(o, a, i)] = x.data[in.At(o, start + a, i)];
      }
    }
  }
  return out;
}

// Splits x along `axis` into pieces of `sizes` (which sum to x.shape[axis]).
Tensors SplitBySizes(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes) {
  Tensors outs;
  int64_t start = 0;
  for (int64_t size : sizes) {
    outs.push_back(TakeRange(x, axis, start, size));
    start += size;
  }
  return outs;
}

// Broadcasts x to `target` (right-aligned; -1 keeps x's dim). Errors name `field`.
Tensor BroadcastTo(const Tensor& x, const std::vector<int64_t>& target, const std::string& field) {
  size_t rank = x.shape.size();
  if (target.size() < rank) {
    ThrowInvalid(field, ShapeToString(target) + " has fewer dims than x " + ShapeToString(x.shape));
  }
  size_t lead = target.size() - rank;
  Shape shape(target.size());
  for (size_t d = 0; d < target.size(); ++d) {
    int64_t t = target[d];
    if (d < lead) {
      if (t < 0) ThrowInvalid(field, "new leading dim " + std::to_string(t) + " must be >= 0");
      shape[d] = t;
      continue;
    }
    int64_t have = x.shape[d - lead];
    if (t == -1) t = have;
    if (t < 0 || (have != t && have != 1)) {
      ThrowInvalid(field,
                   "cannot expand " + ShapeToString(x.shape) + " to " + ShapeToString(target));
    }
    shape[d] = t;
  }
  internal::CheckShape(shape, field);
  Tensor out = internal::Zeros(shape, x.dtype);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    out.data[i] = x.data[internal::BroadcastOffset(internal::Unravel(i, shape), x.shape)];
  }
  return out;
}

}  // namespace

Tensors reshape(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target = attrs.GetInts("shape");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const std::string field = "attrs.shape";
  // A localized target (a shard's shape) is literal: 0 is an empty dim, not "copy".
  const bool exact = attrs.Has(kLocalExact) && attrs.GetBool(kLocalExact);
  Shape shape(target.size());
  int64_t inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t s = target[i];
    if (s == 0 && !exact) {
      if (i >= x.shape.size()) {
        ThrowInvalid(field, "0 at position " + std::to_string(i) + " but x " +
                                ShapeToString(x.shape) + " has no such dim");
      }
      s = x.shape[i];
    } else if (s == -1) {
      if (inferred >= 0) ThrowInvalid(field, "more than one -1 in " + ShapeToString(target));
      inferred = static_cast<int64_t>(i);
      continue;
    } else if (s < -1) {
      ThrowInvalid(field, "negative size in " + ShapeToString(target));
    }
    shape[i] = s;
  }
  internal::CheckShape(shape, field);  // the listed sizes cannot overflow
  for (size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<int64_t>(i) != inferred) known *= shape[i];
  }
  int64_t numel = NumElements(x.shape);
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      ThrowInvalid(field, "cannot infer -1 in " + ShapeToString(target) + " for x " +
                              ShapeToString(x.shape));
    }
    shape[inferred] = numel / known;
  } else if (known != numel) {
    ThrowInvalid(field, ShapeToString(target) + " does not hold the " + std::to_string(numel) +
                            " elements of x " + ShapeToString(x.shape));
  }
  return {Reshaped(x, shape)};
}

Tensors flatten(const Tensors& inputs, const Attrs& attrs) {
  int64_t start_attr = attrs.GetInt("start_axis");
  int64_t stop_attr = attrs.GetInt("stop_axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t rank = internal::Rank(x);
  int64_t start = internal::NormalizeAxisOrScalar(start_attr, rank, "attrs.start_axis");
  int64_t stop = internal::NormalizeAxisOrScalar(stop_attr, rank, "attrs.stop_axis");
  if (rank == 0) return {Reshaped(x, {1})};
  if (start > stop) {
    ThrowInvalid("attrs.start_axis", "start_axis " + std::to_string(start_attr) +
                                         " is after stop_axis " + std::to_string(stop_attr));
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d <= start || d > stop) {
      shape.push_back(x.shape[d]);
    } else {
      shape.back() *= x.shape[d];
    }
  }
  return {Reshaped(x, shape)};
}

Tensors squeeze(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t rank = internal::Rank(x);
  // Localized: exactly the listed dims go (an empty list removes none); each must be 1.
  bool exact =
      attrs.Has(internal::kLocalExact) && attrs.GetBool(internal::kLocalExact);
  std::vector<bool> listed(x.shape.size(), axis.empty() && !exact);
  for (int64_t a : axis) {
    int64_t d = internal::NormalizeAxisOrScalar(a, rank, "attrs.axis");
    if (rank == 0) continue;
    listed[d] = true;
    if (exact && x.shape[d] != 1) {
      ThrowInvalid("attrs.axis",
                   "dim " + std::to_string(a) + " of " + ShapeToString(x.shape) + " is not 1");
    }
  }
  Shape shape;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (!(listed[d] && x.shape[d] == 1)) shape.push_back(x.shape[d]);
  }
  return {Reshaped(x, shape)};
}

Tensors unsqueeze(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t out_rank = internal::Rank(x) + static_cast<int64_t>(axis.size());
  std::vector<bool> is_new(static_cast<size_t>(out_rank), false);
  for (int64_t a : axis) {
    int64_t d = internal::NormalizeAxis(a, out_rank, "attrs.axis");
    if (is_new[d]) ThrowInvalid("attrs.axis", "position " + std::to_string(a) + " listed twice");
    is_new[d] = true;
  }
  Shape shape;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) shape.push_back(is_new[d] ? 1 : x.shape[next++]);
  return {Reshaped(x, shape)};
}

Tensors transpose(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& perm_attr = attrs.GetInts("perm");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t rank = internal::Rank(x);
  if (static_cast<int64_t>(perm_attr.size()) != rank) {
    ThrowInvalid("attrs.perm", ShapeToString(perm_attr) + " is not a permutation of rank " +
                                   std::to_string(rank));
  }
  std::vector<int64_t> perm;
  std::vector<bool> used(perm_attr.size(), false);
  for (int64_t p : perm_attr) {
    int64_t d = internal::NormalizeAxis(p, rank, "attrs.perm");
    if (used[d]) {
      ThrowInvalid("attrs.perm", ShapeToString(perm_attr) + " is not a permutation");
    }
    used[d] = true;
    perm.push_back(d);
  }
  Shape shape;
  for (int64_t d : perm) shape.push_back(x.shape[d]);
  Shape x_strides = internal::Strides(x.shape);
  Tensor out = internal::Zeros(shape, x.dtype);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    std::vector<int64_t> index = internal::Unravel(i, shape);
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d)
      offset += index[d] * x_strides[perm[d]];  // out d = x perm[d]
    out.data[i] = x.data[offset];
  }
  return {out};
}

Tensors split(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& sections = attrs.GetInts("sections");
  int64_t axis_attr = attrs.GetInt("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t axis = internal::NormalizeAxis(axis_attr, internal::Rank(x), "attrs.axis");
  int64_t size = x.shape[axis];
  if (sections.empty()) ThrowInvalid("attrs.sections", "no sections");
  std::vector<int64_t> sizes = sections;
  int64_t inferred = -1;
  int64_t known = 0;  // the sum of the given sizes, kept <= size
  auto mismatch = [&]() {
    ThrowInvalid("attrs.sections", ShapeToString(sections) + " does not sum to dim " +
                                       std::to_string(size) + " of x " + ShapeToString(x.shape));
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (inferred >= 0) {
        ThrowInvalid("attrs.sections", "more than one -1 in " + ShapeToString(sections));
      }
      inferred = static_cast<int64_t>(i);
    } else if (sizes[i] < 0) {
      ThrowInvalid("attrs.sections", "negative section in " + ShapeToString(sections));
    } else if (sizes[i] > size - known) {
      mismatch();
    } else {
      known += sizes[i];
    }
  }
  if (inferred >= 0) {
    sizes[inferred] = size - known;
  } else if (known != size) {
    mismatch();
  }
  return SplitBySizes(x, axis, sizes);
}

Tensors split_with_num(const Tensors& inputs, const Attrs& attrs) {
  int64_t num = attrs.GetInt("num");
  int64_t axis_attr = attrs.GetInt("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t axis = internal::NormalizeAxis(axis_attr, internal::Rank(x), "attrs.axis");
  int64_t size = x.shape[axis];
  if (num <= 0 || size % num != 0) {
    ThrowInvalid("attrs.num", "dim " + std::to_string(size) + " of x " + ShapeToString(x.shape) +
                                  " does not split into " + std::to_string(num) + " equal pieces");
  }
  internal::CheckOutputCount(num);
  return SplitBySizes(x, axis, std::vector<int64_t>(static_cast<size_t>(num), size / num));
}

Tensors unbind(const Tensors& inputs, const Attrs& attrs) {
  int64_t axis_attr = attrs.GetInt("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t axis = internal::NormalizeAxis(axis_attr, internal::Rank(x), "attrs.axis");
  Shape piece_shape = x.shape;
  piece_shape.erase(piece_shape.begin() + axis);
  internal::CheckOutputCount(x.shape[axis]);
  Tensors outs;
  for (int64_t a = 0; a < x.shape[axis]; ++a) {
    outs.push_back(Reshaped(TakeRange(x, axis, a, 1), piece_shape));
  }
  return outs;
}

Tensors concat(const Tensors& inputs, const Attrs& attrs) {
  int64_t axis_attr = attrs.GetInt("axis");
  internal::CheckArityAtLeast(inputs, 1);
  const Tensor& first = inputs[0];
  int64_t axis = internal::NormalizeAxis(axis_attr, internal::Rank(first), "attrs.axis");
  Shape shape = first.shape;
  shape[axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Shape expect = first.shape;
    expect[axis] = inputs[i].shape.size() == first.shape.size() ? inputs[i].shape[axis] : 0;
    if (inputs[i].shape != expect) {
      ThrowInvalid(InputField(i, "shape"),
                   ShapeToString(inputs[i].shape) + " does not concat with " +
                       ShapeToString(first.shape) + " on axis " + std::to_string(axis));
    }
    shape[axis] += inputs[i].shape[axis];
  }
  Tensor out = internal::Zeros(shape, first.dtype);
  AxisView ov = internal::ViewAlong(shape, axis);
  int64_t start = 0;
  for (const Tensor& x : inputs) {
    AxisView in = internal::ViewAlong(x.shape, axis);
    for (int64_t o = 0; o < in.outer; ++o) {
      for (int64_t a = 0; a < in.len; ++a) {
        for (int64_t i = 0; i < in.inner; ++i) {
          out.data[ov.At(o, start + a, i)] = x.data[in.At(o, a, i)];
        }
      }
    }
    start += in.len;
  }
  return {out};
}

Tensors stack(const Tensors& inputs, const Attrs& attrs) {
  int64_t axis_attr = attrs.GetInt("axis");
  internal::CheckArityAtLeast(inputs, 1);
  const Tensor& first = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].shape != first.shape) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape) + " != " +
                                               ShapeToString(first.shape) + " of inputs[0]");
    }
  }
  int64_t axis = internal::NormalizeAxis(axis_attr, internal::Rank(first) + 1, "attrs.axis");
  // Stacking is concatenating the inputs, each with a new size-1 dim at `axis`.
  Shape with_dim = first.shape;
  with_dim.insert(with_dim.begin() + axis, 1);
  Tensors pieces;
  for (const Tensor& x : inputs) pieces.push_back(Reshaped(x, with_dim));
  Attrs concat_attrs;
  concat_attrs.Set("axis", axis);
  return concat(pieces, concat_attrs);
}

Tensors slice(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axes = attrs.GetInts("axes");
  const std::vector<int64_t>& starts = attrs.GetInts("starts");
  const std::vector<int64_t>& ends = attrs.GetInts("ends");
  (void)attrs.GetInts("infer_flags");  // Paddle's marker for runtime-valued starts/ends
  const std::vector<int64_t>& decrease_axis = attrs.GetInts("decrease_axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  int64_t rank = internal::Rank(x);
  if (starts.size() != axes.size()) {
    ThrowInvalid("attrs.starts", "has " + std::to_string(starts.size()) + " entries, axes has " +
                                     std::to_string(axes.size()));
  }
  if (ends.size() != axes.size()) {
    ThrowInvalid("attrs.ends", "has " + std::to_string(ends.size()) + " entries, axes has " +
                                   std::to_string(axes.size()));
  }
  std::vector<int64_t> begin(x.shape.size(), 0);
  Shape shape = x.shape;
  std::vector<bool> sliced(x.shape.size(), false);
  for (size_t j = 0; j < axes.size(); ++j) {
    int64_t d = internal::NormalizeAxis(axes[j], rank, "attrs.axes");
    if (sliced[d]) ThrowInvalid("attrs.axes", "axis " + std::to_string(axes[j]) + " listed twice");
    sliced[d] = true;
    int64_t size = x.shape[d];
    auto clamp = [size](int64_t v) {
      if (v < 0) v += size;
      return v < 0 ? 0 : (v > size ? size : v);
    };
    int64_t s = clamp(starts[j]);
    int64_t e = clamp(ends[j]);
    begin[d] = s;
    shape[d] = e > s ? e - s : 0;
  }
  Tensor out = internal::Zeros(shape, x.dtype);
  Shape x_strides = internal::Strides(x.shape);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    std::vector<int64_t> index = internal::Unravel(i, shape);
    for (size_t d = 0; d < index.size(); ++d) index[d] += begin[d];
    out.data[i] = x.data[internal::Dot(index, x_strides)];
  }
  std::vector<bool> drop(x.shape.size(), false);
  for (int64_t a : decrease_axis) {
    int64_t d = internal::NormalizeAxis(a, rank, "attrs.decrease_axis");
    if (drop[d]) {
      ThrowInvalid("attrs.decrease_axis", "axis " + std::to_string(a) + " listed twice");
    }
    if (shape[d] != 1) {
      ThrowInvalid("attrs.decrease_axis", "dim " + std::to_string(a) + " has size " +
                                              std::to_string(shape[d]) + " after slicing, not 1");
    }
    drop[d] = true;
  }
  Shape kept;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!drop[d]) kept.push_back(shape[d]);
  }
  return {Reshaped(out, kept)};
}

Tensors tile(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& repeat_times = attrs.GetInts("repeat_times");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  for (int64_t r : repeat_times) {
    if (r < 0)
      ThrowInvalid("attrs.repeat_times", "negative entry in " + ShapeToString(repeat_times));
  }
  size_t rank = std::max(x.shape.size(), repeat_times.size());
  Shape in_shape(rank - x.shape.size(), 1);  // x left-padded with 1
  in_shape.insert(in_shape.end(), x.shape.begin(), x.shape.end());
  Shape repeats(rank - repeat_times.size(), 1);
  repeats.insert(repeats.end(), repeat_times.begin(), repeat_times.end());
  Shape shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (repeats[d] != 0 && in_shape[d] > (int64_t{1} << 62) / repeats[d]) {
      ThrowInvalid("attrs.repeat_times", "output too large");
    }
    shape[d] = in_shape[d] * repeats[d];
  }
  internal::CheckShape(shape, "attrs.repeat_times");
  Shape in_strides = internal::Strides(in_shape);
  Tensor out = internal::Zeros(shape, x.dtype);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    std::vector<int64_t> index = internal::Unravel(i, shape);
    for (size_t d = 0; d < rank; ++d) index[d] %= in_shape[d];  // in_shape[d] > 0 here
    out.data[i] = x.data[internal::Dot(index, in_strides)];
  }
  return {out};
}

Tensors expand(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target = attrs.GetInts("shape");
  CheckArity(inputs, 1);
  return {BroadcastTo(inputs[0], target, "attrs.shape")};
}

Tensors expand_as(const Tensors& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target_shape = attrs.GetInts("target_shape");
  CheckArity(inputs, 2);
  if (target_shape.empty())
    return {BroadcastTo(inputs[0], inputs[1].shape, InputField(1, "shape"))};
  return {BroadcastTo(inputs[0], target_shape, "attrs.target_shape")};
}

Tensors triu(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  if (x.shape.size() < 2) ThrowInvalid(InputField(0, "shape"), "triu needs rank >= 2");
  const int64_t diagonal = attrs.GetInt("diagonal");
  const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
  Tensor out = x;
  for (int64_t k = 0; k < NumElements(x.shape); ++k) {
    const int64_t col = k % cols, row = (k / cols) % rows;
    if (col - row < diagonal) out.data[k] = 0.0;
  }
  return {out};
}

// tril keeps x where col - row <= diagonal.
Tensors tril(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  if (x.shape.size() < 2) ThrowInvalid(InputField(0, "shape"), "tril needs rank >= 2");
  const int64_t diagonal = attrs.GetInt("diagonal");
  const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
  Tensor out = x;
  for (int64_t k = 0; k < NumElements(x.shape); ++k) {
    const int64_t col = k % cols, row = (k / cols) % rows;
    if (col - row > diagonal) out.data[k] = 0.0;
  }
  return {out};
}

Tensors tril_triu(const Tensors& inputs, const Attrs& attrs) {
  if (inputs.size() == 1 && inputs[0].shape.size() < 2) {
    ThrowInvalid(InputField(0, "shape"), "tril_triu needs rank >= 2");
  }
  return attrs.GetBool("lower") ? tril(inputs, attrs) : triu(inputs, attrs);
}

}  // namespace spmd::reference::ops
