// Shape ops (docs/OPS.md "Shape ops"). They only move values, so they work on bytes and
// take any dtype; every output keeps x's dtype (the first input's for concat and stack,
// whose inputs must then share it). Copies are contiguous blocks (memcpy) wherever the
// layout allows; transpose goes through internal::PermuteBytes.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/permute.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::InputField;
using internal::NewOutput;

// x with its data reinterpreted under `shape` (same element count, row-major).
Tensor Reshaped(const Tensor& x, const Shape& shape) {
  Tensor out = x;
  out.Reshape(shape);
  return out;
}

// The elements [start, start + len) of x along `axis` (x.shape[axis] becomes len).
Tensor TakeRange(const Tensor& x, int64_t axis, int64_t start, int64_t len) {
  const AxisView in = internal::ViewAlong(x.shape(), axis);
  Shape shape = x.shape();
  shape[axis] = len;
  Tensor out = NewOutput(shape, x.dtype());
  const size_t es = x.element_size();
  const size_t block = static_cast<size_t>(len * in.inner) * es;
  if (block == 0) return out;
  for (int64_t o = 0; o < in.outer; ++o) {
    std::memcpy(out.bytes() + o * block, x.bytes() + ((o * in.len + start) * in.inner) * es,
                block);
  }
  return out;
}

Tensors SplitBySizes(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes) {
  Tensors outs;
  outs.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t size : sizes) {
    outs.push_back(TakeRange(x, axis, start, size));
    start += size;
  }
  return outs;
}

// Broadcasts x to `target` (right-aligned; -1 keeps x's dim). Errors name `field`.
Tensor BroadcastTo(const Tensor& x, const std::vector<int64_t>& target, const std::string& field) {
  const size_t rank = x.shape().size();
  if (target.size() < rank) {
    ThrowInvalid(field, ShapeToString(target) + " has fewer dims than x " +
                            ShapeToString(x.shape()));
  }
  const size_t lead = target.size() - rank;
  Shape shape(target.size());
  for (size_t d = 0; d < target.size(); ++d) {
    int64_t t = target[d];
    if (d < lead) {
      if (t < 0) ThrowInvalid(field, "new leading dim " + std::to_string(t) + " must be >= 0");
      shape[d] = t;
      continue;
    }
    const int64_t have = x.shape()[d - lead];
    if (t == -1) t = have;
    if (t < 0 || (have != t && have != 1)) {
      ThrowInvalid(field, "cannot expand " + ShapeToString(x.shape()) + " to " +
                              ShapeToString(target));
    }
    shape[d] = t;
  }
  CheckShape(shape, 1, field);
  Tensor out = NewOutput(shape, x.dtype());
  const internal::BroadcastLoop plan = internal::PlanBroadcast(shape, {x.shape()});
  const int64_t stride = plan.inner_stride(0);
  const size_t es = x.element_size();
  internal::ForEachRow(plan, [&](int64_t o, const int64_t* off, int64_t len) {
    internal::CopyStrided(out.bytes() + o * static_cast<int64_t>(es),
                          x.bytes() + off[0] * static_cast<int64_t>(es), len, stride, es);
  });
  return out;
}

}  // namespace

Tensors reshape(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target = attrs.GetInts("shape");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const std::string field = "attrs.shape";
  // A localized target (a shard's shape) is literal: 0 is an empty dim, not "copy".
  const bool exact = attrs.Has(kLocalExact) && attrs.GetBool(kLocalExact);
  Shape shape(target.size());
  int64_t inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t s = target[i];
    if (s == 0 && !exact) {
      if (i >= x.shape().size()) {
        ThrowInvalid(field, "0 at position " + std::to_string(i) + " but x " +
                                ShapeToString(x.shape()) + " has no such dim");
      }
      s = x.shape()[i];
    } else if (s == -1) {
      if (inferred >= 0) ThrowInvalid(field, "more than one -1 in " + ShapeToString(target));
      inferred = static_cast<int64_t>(i);
      continue;
    } else if (s < -1) {
      ThrowInvalid(field, "negative size in " + ShapeToString(target));
    }
    shape[i] = s;
  }
  CheckShape(shape, 1, field);  // the listed sizes cannot overflow
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<int64_t>(i) != inferred) known *= shape[i];
  }
  const int64_t numel = x.numel();
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      ThrowInvalid(field, "cannot infer -1 in " + ShapeToString(target) + " for x " +
                              ShapeToString(x.shape()));
    }
    shape[inferred] = numel / known;
  } else if (known != numel) {
    ThrowInvalid(field, ShapeToString(target) + " does not hold the " + std::to_string(numel) +
                            " elements of x " + ShapeToString(x.shape()));
  }
  return TensorList(Reshaped(x, shape));
}

Tensors flatten(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t start_attr = attrs.GetInt("start_axis");
  const int64_t stop_attr = attrs.GetInt("stop_axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  const int64_t start = internal::NormalizeAxisOrScalar(start_attr, rank, "attrs.start_axis");
  const int64_t stop = internal::NormalizeAxisOrScalar(stop_attr, rank, "attrs.stop_axis");
  if (rank == 0) return TensorList(Reshaped(x, {1}));
  if (start > stop) {
    ThrowInvalid("attrs.start_axis", "start_axis " + std::to_string(start_attr) +
                                         " is after stop_axis " + std::to_string(stop_attr));
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d <= start || d > stop) {
      shape.push_back(x.shape()[d]);
    } else {
      shape.back() *= x.shape()[d];
    }
  }
  return TensorList(Reshaped(x, shape));
}

Tensors squeeze(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  // Localized: exactly the listed dims go (an empty list removes none); each must be 1.
  const bool exact = attrs.Has(kLocalExact) && attrs.GetBool(kLocalExact);
  std::vector<bool> listed(x.shape().size(), axis.empty() && !exact);
  for (int64_t a : axis) {
    const int64_t d = internal::NormalizeAxisOrScalar(a, rank, "attrs.axis");
    if (rank == 0) continue;
    listed[d] = true;
    if (exact && x.shape()[d] != 1) {
      ThrowInvalid("attrs.axis",
                   "dim " + std::to_string(a) + " of " + ShapeToString(x.shape()) + " is not 1");
    }
  }
  Shape shape;
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (!(listed[d] && x.shape()[d] == 1)) shape.push_back(x.shape()[d]);
  }
  return TensorList(Reshaped(x, shape));
}

Tensors unsqueeze(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t out_rank = x.rank() + static_cast<int64_t>(axis.size());
  std::vector<bool> is_new(static_cast<size_t>(out_rank), false);
  for (int64_t a : axis) {
    const int64_t d = internal::NormalizeAxis(a, out_rank, "attrs.axis");
    if (is_new[d]) ThrowInvalid("attrs.axis", "position " + std::to_string(a) + " listed twice");
    is_new[d] = true;
  }
  Shape shape;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) shape.push_back(is_new[d] ? 1 : x.shape()[next++]);
  return TensorList(Reshaped(x, shape));
}

Tensors transpose(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& perm_attr = attrs.GetInts("perm");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  if (static_cast<int64_t>(perm_attr.size()) != rank) {
    ThrowInvalid("attrs.perm", ShapeToString(perm_attr) + " is not a permutation of rank " +
                                   std::to_string(rank));
  }
  std::vector<int64_t> perm;
  std::vector<bool> used(perm_attr.size(), false);
  for (int64_t p : perm_attr) {
    const int64_t d = internal::NormalizeAxis(p, rank, "attrs.perm");
    if (used[d]) ThrowInvalid("attrs.perm", ShapeToString(perm_attr) + " is not a permutation");
    used[d] = true;
    perm.push_back(d);
  }
  Shape shape;
  for (int64_t d : perm) shape.push_back(x.shape()[d]);
  Tensor out = NewOutput(shape, x.dtype());
  internal::PermuteBytes(out.bytes(), x.bytes(), x.shape(), perm, x.element_size());
  return TensorList(std::move(out));
}

Tensors split(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& sections = attrs.GetInts("sections");
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t axis = internal::NormalizeAxis(axis_attr, x.rank(), "attrs.axis");
  const int64_t size = x.shape()[axis];
  if (sections.empty()) ThrowInvalid("attrs.sections", "no sections");
  std::vector<int64_t> sizes = sections;
  int64_t inferred = -1;
  int64_t known = 0;  // the sum of the given sizes, kept <= size
  auto mismatch = [&]() {
    ThrowInvalid("attrs.sections", ShapeToString(sections) + " does not sum to dim " +
                                       std::to_string(size) + " of x " + ShapeToString(x.shape()));
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
  internal::CheckOutputCount(static_cast<int64_t>(sizes.size()));
  return SplitBySizes(x, axis, sizes);
}

Tensors split_with_num(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t num = attrs.GetInt("num");
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t axis = internal::NormalizeAxis(axis_attr, x.rank(), "attrs.axis");
  const int64_t size = x.shape()[axis];
  if (num <= 0 || size % num != 0) {
    ThrowInvalid("attrs.num", "dim " + std::to_string(size) + " of x " +
                                  ShapeToString(x.shape()) + " does not split into " +
                                  std::to_string(num) + " equal pieces");
  }
  internal::CheckOutputCount(num);
  return SplitBySizes(x, axis, std::vector<int64_t>(static_cast<size_t>(num), size / num));
}

Tensors unbind(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t axis = internal::NormalizeAxis(axis_attr, x.rank(), "attrs.axis");
  Shape piece_shape = x.shape();
  piece_shape.erase(piece_shape.begin() + axis);
  internal::CheckOutputCount(x.shape()[axis]);
  Tensors outs;
  outs.reserve(static_cast<size_t>(x.shape()[axis]));
  for (int64_t a = 0; a < x.shape()[axis]; ++a) {
    Tensor piece = TakeRange(x, axis, a, 1);
    piece.Reshape(piece_shape);
    outs.push_back(std::move(piece));
  }
  return outs;
}

Tensors concat(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t axis_attr = attrs.GetInt("axis");
  internal::CheckArityAtLeast(inputs, 1);
  const Tensor& first = inputs[0];
  const int64_t axis = internal::NormalizeAxis(axis_attr, first.rank(), "attrs.axis");
  Shape shape = first.shape();
  shape[axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Shape expect = first.shape();
    expect[axis] = inputs[i].rank() == first.rank() ? inputs[i].shape()[axis] : 0;
    if (inputs[i].shape() != expect) {
      ThrowInvalid(InputField(i, "shape"),
                   ShapeToString(inputs[i].shape()) + " does not concat with " +
                       ShapeToString(first.shape()) + " on axis " + std::to_string(axis));
    }
    if (shape[axis] > (int64_t{1} << 62) - inputs[i].shape()[axis]) {
      ThrowUnsupported("outputs", "the concatenated dim is too large");
    }
    shape[axis] += inputs[i].shape()[axis];
  }
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != first.dtype()) {
      ThrowInvalid(InputField(i, "dtype"), std::string(ToString(inputs[i].dtype())) +
                                               " differs from " +
                                               std::string(ToString(first.dtype())) +
                                               " of inputs[0]");
    }
  }
  internal::CheckOutputShape(shape);
  Tensor out = NewOutput(shape, first.dtype());
  const AxisView ov = internal::ViewAlong(shape, axis);
  const size_t es = first.element_size();
  const size_t out_block = static_cast<size_t>(ov.len * ov.inner) * es;
  size_t at = 0;  // byte offset of this input's block within an output block
  for (const Tensor& x : inputs) {
    const size_t block = static_cast<size_t>(x.shape()[axis] * ov.inner) * es;
    if (block > 0) {
      for (int64_t o = 0; o < ov.outer; ++o) {
        std::memcpy(out.bytes() + o * out_block + at, x.bytes() + o * block, block);
      }
    }
    at += block;
  }
  return TensorList(std::move(out));
}

Tensors stack(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t axis_attr = attrs.GetInt("axis");
  internal::CheckArityAtLeast(inputs, 1);
  const Tensor& first = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].shape() != first.shape()) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape()) + " != " +
                                               ShapeToString(first.shape()) + " of inputs[0]");
    }
  }
  const int64_t axis = internal::NormalizeAxis(axis_attr, first.rank() + 1, "attrs.axis");
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != first.dtype()) {
      ThrowInvalid(InputField(i, "dtype"), std::string(ToString(inputs[i].dtype())) +
                                               " differs from " +
                                               std::string(ToString(first.dtype())) +
                                               " of inputs[0]");
    }
  }
  Shape shape = first.shape();
  shape.insert(shape.begin() + axis, static_cast<int64_t>(inputs.size()));
  internal::CheckOutputShape(shape);
  Tensor out = NewOutput(shape, first.dtype());
  // Each input is [outer, inner] around the new dim; the output is [outer, count, inner].
  const int64_t outer = NumElements(Shape(first.shape().begin(), first.shape().begin() + axis));
  const int64_t inner = NumElements(Shape(first.shape().begin() + axis, first.shape().end()));
  const size_t block = static_cast<size_t>(inner) * first.element_size();
  if (block == 0) return TensorList(std::move(out));
  const size_t count = inputs.size();
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < count; ++i) {
      std::memcpy(out.bytes() + (o * count + i) * block, inputs[i].bytes() + o * block, block);
    }
  }
  return TensorList(std::move(out));
}

Tensors slice(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axes = attrs.GetInts("axes");
  const std::vector<int64_t>& starts = attrs.GetInts("starts");
  const std::vector<int64_t>& ends = attrs.GetInts("ends");
  (void)attrs.GetInts("infer_flags");  // Paddle's marker for runtime-valued starts/ends
  const std::vector<int64_t>& decrease_axis = attrs.GetInts("decrease_axis");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  if (starts.size() != axes.size()) {
    ThrowInvalid("attrs.starts", "has " + std::to_string(starts.size()) + " entries, axes has " +
                                     std::to_string(axes.size()));
  }
  if (ends.size() != axes.size()) {
    ThrowInvalid("attrs.ends", "has " + std::to_string(ends.size()) + " entries, axes has " +
                                   std::to_string(axes.size()));
  }
  std::vector<int64_t> begin(x.shape().size(), 0);
  Shape shape = x.shape();
  std::vector<bool> sliced(x.shape().size(), false);
  for (size_t j = 0; j < axes.size(); ++j) {
    const int64_t d = internal::NormalizeAxis(axes[j], rank, "attrs.axes");
    if (sliced[d]) ThrowInvalid("attrs.axes", "axis " + std::to_string(axes[j]) + " listed twice");
    sliced[d] = true;
    const int64_t size = x.shape()[d];
    auto clamp = [size](int64_t v) {
      if (v < 0) v += size;  // no overflow: size >= 0
      return v < 0 ? 0 : (v > size ? size : v);
    };
    const int64_t s = clamp(starts[j]);
    const int64_t e = clamp(ends[j]);
    begin[d] = s;
    shape[d] = e > s ? e - s : 0;
  }
  std::vector<bool> drop(x.shape().size(), false);
  for (int64_t a : decrease_axis) {
    const int64_t d = internal::NormalizeAxis(a, rank, "attrs.decrease_axis");
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
  Tensor out = NewOutput(kept, x.dtype());
  const int64_t numel = out.numel();
  if (numel > 0) {
    // Rows: from the last sliced dim t on, each output row [t:] is one contiguous run of x.
    int64_t t = -1;
    for (int64_t d = 0; d < rank; ++d) {
      if (shape[d] != x.shape()[d]) t = d;
    }
    const size_t es = x.element_size();
    if (t < 0) {
      std::memcpy(out.bytes(), x.bytes(), static_cast<size_t>(numel) * es);
    } else {
      Shape x_strides(x.shape().size(), 1);
      for (int64_t d = rank - 2; d >= 0; --d) x_strides[d] = x_strides[d + 1] * x.shape()[d + 1];
      const int64_t len = shape[t] * x_strides[t];
      const int64_t rows = numel / len;
      std::vector<int64_t> index(static_cast<size_t>(t), 0);
      int64_t in = 0;
      for (int64_t d = 0; d <= t; ++d) in += begin[d] * x_strides[d];
      for (int64_t row = 0; row < rows; ++row) {
        std::memcpy(out.bytes() + row * len * static_cast<int64_t>(es),
                    x.bytes() + in * static_cast<int64_t>(es), static_cast<size_t>(len) * es);
        for (int64_t d = t - 1; d >= 0; --d) {
          in += x_strides[d];
          if (++index[d] < shape[d]) break;
          in -= x_strides[d] * shape[d];
          index[d] = 0;
        }
      }
    }
  }
  return TensorList(std::move(out));
}

Tensors tile(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& repeat_times = attrs.GetInts("repeat_times");
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  for (int64_t r : repeat_times) {
    if (r < 0) {
      ThrowInvalid("attrs.repeat_times", "negative entry in " + ShapeToString(repeat_times));
    }
  }
  const size_t rank = std::max(x.shape().size(), repeat_times.size());
  Shape in_shape(rank - x.shape().size(), 1);  // x left-padded with 1
  in_shape.insert(in_shape.end(), x.shape().begin(), x.shape().end());
  Shape repeats(rank - repeat_times.size(), 1);
  repeats.insert(repeats.end(), repeat_times.begin(), repeat_times.end());
  Shape shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (repeats[d] != 0 && in_shape[d] > (int64_t{1} << 62) / repeats[d]) {
      ThrowInvalid("attrs.repeat_times", "output too large");
    }
    shape[d] = in_shape[d] * repeats[d];
  }
  CheckShape(shape, 1, "attrs.repeat_times");
  Tensor out = NewOutput(shape, x.dtype());
  const int64_t numel = out.numel();
  if (numel == 0) return TensorList(std::move(out));
  const size_t es = x.element_size();
  if (rank == 0) {
    std::memcpy(out.bytes(), x.bytes(), es);
    return TensorList(std::move(out));
  }
  // Each output row (last dim) is x's row at (index mod in_shape), repeated.
  Shape in_strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * in_shape[d + 1];
  const int64_t in_len = in_shape[rank - 1];
  const size_t row_bytes = static_cast<size_t>(in_len) * es;
  const int64_t out_len = shape[rank - 1];
  const int64_t rows = numel / out_len;
  std::vector<int64_t> index(rank - 1, 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t in = 0;
    for (size_t d = 0; d + 1 < rank; ++d) in += (index[d] % in_shape[d]) * in_strides[d];
    std::byte* dst = out.bytes() + row * out_len * static_cast<int64_t>(es);
    for (int64_t r = 0; r < repeats[rank - 1]; ++r) {
      std::memcpy(dst + r * row_bytes, x.bytes() + in * static_cast<int64_t>(es), row_bytes);
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return TensorList(std::move(out));
}

Tensors expand(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target = attrs.GetInts("shape");
  CheckArity(inputs, 1);
  return TensorList(BroadcastTo(inputs[0], target, "attrs.shape"));
}

Tensors expand_as(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target_shape = attrs.GetInts("target_shape");
  CheckArity(inputs, 2);
  if (target_shape.empty()) {
    return TensorList(BroadcastTo(inputs[0], inputs[1].shape(), InputField(1, "shape")));
  }
  return TensorList(BroadcastTo(inputs[0], target_shape, "attrs.target_shape"));
}

namespace {

// Zeroes, per matrix row r of x's last two dims, the columns [begin(r), end(r)) clamped
// to [0, cols): triu's first columns, tril's last.
template <typename Range>
Tensors ZeroRowRanges(const TensorArgs& inputs, const char* name, Range range) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  if (x.rank() < 2) ThrowInvalid(InputField(0, "shape"), std::string(name) + " needs rank >= 2");
  const int64_t rows = x.shape()[x.rank() - 2];
  const int64_t cols = x.shape()[x.rank() - 1];
  Tensor out = x;
  const int64_t numel = x.numel();
  if (numel == 0) return TensorList(std::move(out));
  const size_t es = x.element_size();
  const int64_t matrices = numel / (rows * cols);
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto [begin, end] = range(r, cols);
      const int64_t b = std::clamp<int64_t>(begin, 0, cols), e = std::clamp<int64_t>(end, 0, cols);
      if (e > b) {
        std::memset(out.bytes() + ((m * rows + r) * cols + b) * static_cast<int64_t>(es), 0,
                    static_cast<size_t>(e - b) * es);
      }
    }
  }
  return TensorList(std::move(out));
}

// |diagonal| beyond rows + cols changes nothing: clamped so row + diagonal cannot overflow.
int64_t ClampDiagonal(const TensorArgs& inputs, const Attrs& attrs) {
  if (inputs.size() != 1 || inputs[0].rank() < 2) return 0;  // ZeroRowRanges refuses them
  const Shape& s = inputs[0].shape();
  const int64_t rows = s[s.size() - 2], cols = s.back();
  return std::clamp<int64_t>(attrs.GetInt("diagonal"), -rows - 1, cols + 1);
}

}  // namespace

// triu keeps x where col - row >= diagonal: per matrix row, the first
// clamp(row + diagonal, 0, cols) columns become zero.
Tensors triu(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t d = ClampDiagonal(inputs, attrs);
  return ZeroRowRanges(inputs, "triu", [d](int64_t r, int64_t) {
    return std::pair<int64_t, int64_t>{0, r + d};
  });
}

// tril keeps x where col - row <= diagonal: the columns from row + diagonal + 1 on
// become zero.
Tensors tril(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t d = ClampDiagonal(inputs, attrs);
  return ZeroRowRanges(inputs, "tril", [d](int64_t r, int64_t cols) {
    return std::pair<int64_t, int64_t>{r + d + 1, cols};
  });
}

Tensors tril_triu(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t d = ClampDiagonal(inputs, attrs);
  if (attrs.GetBool("lower")) {
    return ZeroRowRanges(inputs, "tril_triu", [d](int64_t r, int64_t cols) {
      return std::pair<int64_t, int64_t>{r + d + 1, cols};
    });
  }
  return ZeroRowRanges(inputs, "tril_triu", [d](int64_t r, int64_t) {
    return std::pair<int64_t, int64_t>{0, r + d};
  });
}

}  // namespace spmd::kernels::cpu
