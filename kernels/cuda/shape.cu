// CUDA kernels of the shape family (the ops of kernels/cpu/shape.cc): the CPU kernels'
// checks in the same order (so both refuse the same requests naming the same fields), then
// device copies: reshape / flatten / squeeze / unsqueeze one cudaMemcpyAsync under the new
// shape; split / unbind / concat / stack / slice / tile / expand / expand_as copy plans
// (kernels/cuda/index_map.h: a single contiguous run becomes a cudaMemcpyAsync, the rest a
// strided kernel over units as wide as the layout allows); transpose PermuteOnDevice;
// triu / tril / tril_triu one pass that keeps or zeroes each element. Any dtype: they
// move bytes (HalfInputs::kNative), and every output keeps x's dtype.
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/registry.h"
#include "rules/local_attrs.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::AxisView;
using detail::ci::CheckArity;
using detail::ci::InputField;

Tensor TakeRange(const Tensor& x, int64_t axis, int64_t start, int64_t len) {
  Shape shape = x.shape();
  shape[axis] = len;
  Tensor out = detail::NewOut(x, shape, x.dtype());
  detail::RunCopyPlan(PlanTakeRange(x.shape(), axis, start, len, static_cast<int64_t>(x.element_size())),
                      out.bytes(), x.bytes(), detail::StreamOf(x));
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

Tensor BroadcastTo(const Tensor& x, const std::vector<int64_t>& target, const std::string& field) {
  const size_t rank = x.shape().size();
  if (target.size() < rank) {
    ThrowInvalid(field, ShapeToString(target) + " has fewer dims than x " + ShapeToString(x.shape()));
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
      ThrowInvalid(field, "cannot expand " + ShapeToString(x.shape()) + " to " + ShapeToString(target));
    }
    shape[d] = t;
  }
  CheckShape(shape, 1, field);
  Tensor out = detail::NewOut(x, shape, x.dtype());
  detail::RunCopyPlan(PlanExpand(x.shape(), shape, static_cast<int64_t>(x.element_size())), out.bytes(),
                      x.bytes(), detail::StreamOf(x));
  return out;
}

Tensors Reshape(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target = attrs.GetInts("shape");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const std::string field = "attrs.shape";
  const bool exact = attrs.Has(kLocalExact) && attrs.GetBool(kLocalExact);
  Shape shape(target.size());
  int64_t inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t s = target[i];
    if (s == 0 && !exact) {
      if (i >= x.shape().size()) {
        ThrowInvalid(field, "0 at position " + std::to_string(i) + " but x " + ShapeToString(x.shape()) +
                                " has no such dim");
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
  CheckShape(shape, 1, field);
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<int64_t>(i) != inferred) known *= shape[i];
  }
  const int64_t numel = x.numel();
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      ThrowInvalid(field, "cannot infer -1 in " + ShapeToString(target) + " for x " + ShapeToString(x.shape()));
    }
    shape[inferred] = numel / known;
  } else if (known != numel) {
    ThrowInvalid(field, ShapeToString(target) + " does not hold the " + std::to_string(numel) +
                            " elements of x " + ShapeToString(x.shape()));
  }
  return TensorList(detail::CopyAs(x, shape));
}

Tensors Flatten(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t start_attr = attrs.GetInt("start_axis");
  const int64_t stop_attr = attrs.GetInt("stop_axis");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  const int64_t start = detail::ci::NormalizeAxisOrScalar(start_attr, rank, "attrs.start_axis");
  const int64_t stop = detail::ci::NormalizeAxisOrScalar(stop_attr, rank, "attrs.stop_axis");
  if (rank == 0) return TensorList(detail::CopyAs(x, {1}));
  if (start > stop) {
    ThrowInvalid("attrs.start_axis", "start_axis " + std::to_string(start_attr) + " is after stop_axis " +
                                         std::to_string(stop_attr));
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d <= start || d > stop) {
      shape.push_back(x.shape()[d]);
    } else {
      shape.back() *= x.shape()[d];
    }
  }
  return TensorList(detail::CopyAs(x, shape));
}

Tensors Squeeze(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  const bool exact = attrs.Has(kLocalExact) && attrs.GetBool(kLocalExact);
  std::vector<bool> listed(x.shape().size(), axis.empty() && !exact);
  for (int64_t a : axis) {
    const int64_t d = detail::ci::NormalizeAxisOrScalar(a, rank, "attrs.axis");
    if (rank == 0) continue;
    listed[d] = true;
    if (exact && x.shape()[d] != 1) {
      ThrowInvalid("attrs.axis", "dim " + std::to_string(a) + " of " + ShapeToString(x.shape()) + " is not 1");
    }
  }
  Shape shape;
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (!(listed[d] && x.shape()[d] == 1)) shape.push_back(x.shape()[d]);
  }
  return TensorList(detail::CopyAs(x, shape));
}

Tensors Unsqueeze(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t out_rank = x.rank() + static_cast<int64_t>(axis.size());
  std::vector<bool> is_new(static_cast<size_t>(out_rank), false);
  for (int64_t a : axis) {
    const int64_t d = detail::ci::NormalizeAxis(a, out_rank, "attrs.axis");
    if (is_new[d]) ThrowInvalid("attrs.axis", "position " + std::to_string(a) + " listed twice");
    is_new[d] = true;
  }
  Shape shape;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) shape.push_back(is_new[d] ? 1 : x.shape()[next++]);
  return TensorList(detail::CopyAs(x, shape));
}

Tensors Transpose(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& perm_attr = attrs.GetInts("perm");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t rank = x.rank();
  if (static_cast<int64_t>(perm_attr.size()) != rank) {
    ThrowInvalid("attrs.perm", ShapeToString(perm_attr) + " is not a permutation of rank " + std::to_string(rank));
  }
  std::vector<int64_t> perm;
  std::vector<bool> used(perm_attr.size(), false);
  for (int64_t p : perm_attr) {
    const int64_t d = detail::ci::NormalizeAxis(p, rank, "attrs.perm");
    if (used[d]) ThrowInvalid("attrs.perm", ShapeToString(perm_attr) + " is not a permutation");
    used[d] = true;
    perm.push_back(d);
  }
  Shape shape;
  for (int64_t d : perm) shape.push_back(x.shape()[d]);
  detail::ci::CheckOutputShape(shape);
  return TensorList(PermuteOnDevice(x, perm));
}

Tensors Split(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& sections = attrs.GetInts("sections");
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t axis = detail::ci::NormalizeAxis(axis_attr, x.rank(), "attrs.axis");
  const int64_t size = x.shape()[axis];
  if (sections.empty()) ThrowInvalid("attrs.sections", "no sections");
  std::vector<int64_t> sizes = sections;
  int64_t inferred = -1;
  int64_t known = 0;
  auto mismatch = [&]() {
    ThrowInvalid("attrs.sections", ShapeToString(sections) + " does not sum to dim " + std::to_string(size) +
                                       " of x " + ShapeToString(x.shape()));
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (inferred >= 0) ThrowInvalid("attrs.sections", "more than one -1 in " + ShapeToString(sections));
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
  detail::ci::CheckOutputCount(static_cast<int64_t>(sizes.size()));
  return SplitBySizes(x, axis, sizes);
}

Tensors SplitWithNum(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t num = attrs.GetInt("num");
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t axis = detail::ci::NormalizeAxis(axis_attr, x.rank(), "attrs.axis");
  const int64_t size = x.shape()[axis];
  if (num <= 0 || size % num != 0) {
    ThrowInvalid("attrs.num", "dim " + std::to_string(size) + " of x " + ShapeToString(x.shape()) +
                                  " does not split into " + std::to_string(num) + " equal pieces");
  }
  detail::ci::CheckOutputCount(num);
  return SplitBySizes(x, axis, std::vector<int64_t>(static_cast<size_t>(num), size / num));
}

Tensors Unbind(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t axis = detail::ci::NormalizeAxis(axis_attr, x.rank(), "attrs.axis");
  Shape piece_shape = x.shape();
  piece_shape.erase(piece_shape.begin() + axis);
  detail::ci::CheckOutputCount(x.shape()[axis]);
  Tensors outs;
  outs.reserve(static_cast<size_t>(x.shape()[axis]));
  for (int64_t a = 0; a < x.shape()[axis]; ++a) {
    Tensor piece = TakeRange(x, axis, a, 1);
    piece.Reshape(piece_shape);
    outs.push_back(std::move(piece));
  }
  return outs;
}

Tensors Concat(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckInputs(inputs, true);
  detail::ci::CheckArityAtLeast(inputs, 1);
  const Tensor& first = inputs[0];
  const int64_t axis = detail::ci::NormalizeAxis(axis_attr, first.rank(), "attrs.axis");
  Shape shape = first.shape();
  shape[axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Shape expect = first.shape();
    expect[axis] = inputs[i].rank() == first.rank() ? inputs[i].shape()[axis] : 0;
    if (inputs[i].shape() != expect) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape()) + " does not concat with " +
                                               ShapeToString(first.shape()) + " on axis " + std::to_string(axis));
    }
    if (shape[axis] > (int64_t{1} << 62) - inputs[i].shape()[axis]) {
      ThrowUnsupported("outputs", "the concatenated dim is too large");
    }
    shape[axis] += inputs[i].shape()[axis];
  }
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != first.dtype()) {
      ThrowInvalid(InputField(i, "dtype"), std::string(ToString(inputs[i].dtype())) + " differs from " +
                                               std::string(ToString(first.dtype())) + " of inputs[0]");
    }
  }
  Tensor out = detail::NewOut(first, shape, first.dtype());
  const int64_t es = static_cast<int64_t>(first.element_size());
  int64_t at = 0;
  for (const Tensor& x : inputs) {
    detail::RunCopyPlan(PlanConcatPiece(shape, axis, at, x.shape(), es), out.bytes(), x.bytes(),
                        detail::StreamOf(first));
    at += x.shape()[axis];
  }
  return TensorList(std::move(out));
}

Tensors Stack(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t axis_attr = attrs.GetInt("axis");
  CheckInputs(inputs, true);
  detail::ci::CheckArityAtLeast(inputs, 1);
  const Tensor& first = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].shape() != first.shape()) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape()) + " != " +
                                               ShapeToString(first.shape()) + " of inputs[0]");
    }
  }
  const int64_t axis = detail::ci::NormalizeAxis(axis_attr, first.rank() + 1, "attrs.axis");
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != first.dtype()) {
      ThrowInvalid(InputField(i, "dtype"), std::string(ToString(inputs[i].dtype())) + " differs from " +
                                               std::string(ToString(first.dtype())) + " of inputs[0]");
    }
  }
  Shape shape = first.shape();
  const int64_t count = static_cast<int64_t>(inputs.size());
  shape.insert(shape.begin() + axis, count);
  Tensor out = detail::NewOut(first, shape, first.dtype());
  const int64_t es = static_cast<int64_t>(first.element_size());
  for (int64_t i = 0; i < count; ++i) {
    detail::RunCopyPlan(PlanStackPiece(first.shape(), axis, i, count, es), out.bytes(),
                        inputs[static_cast<size_t>(i)].bytes(), detail::StreamOf(first));
  }
  return TensorList(std::move(out));
}

Tensors Slice(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& axes = attrs.GetInts("axes");
  const std::vector<int64_t>& starts = attrs.GetInts("starts");
  const std::vector<int64_t>& ends = attrs.GetInts("ends");
  (void)attrs.GetInts("infer_flags");
  const std::vector<int64_t>& decrease_axis = attrs.GetInts("decrease_axis");
  CheckInputs(inputs, true);
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
    const int64_t d = detail::ci::NormalizeAxis(axes[j], rank, "attrs.axes");
    if (sliced[d]) ThrowInvalid("attrs.axes", "axis " + std::to_string(axes[j]) + " listed twice");
    sliced[d] = true;
    const int64_t size = x.shape()[d];
    auto clamp = [size](int64_t v) {
      if (v < 0) v += size;
      return v < 0 ? 0 : (v > size ? size : v);
    };
    const int64_t s = clamp(starts[j]);
    const int64_t e = clamp(ends[j]);
    begin[d] = s;
    shape[d] = e > s ? e - s : 0;
  }
  std::vector<bool> drop(x.shape().size(), false);
  for (int64_t a : decrease_axis) {
    const int64_t d = detail::ci::NormalizeAxis(a, rank, "attrs.decrease_axis");
    if (drop[d]) ThrowInvalid("attrs.decrease_axis", "axis " + std::to_string(a) + " listed twice");
    if (shape[d] != 1) {
      ThrowInvalid("attrs.decrease_axis", "dim " + std::to_string(a) + " has size " + std::to_string(shape[d]) +
                                              " after slicing, not 1");
    }
    drop[d] = true;
  }
  Shape kept;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!drop[d]) kept.push_back(shape[d]);
  }
  Tensor out = detail::NewOut(x, kept, x.dtype());
  detail::RunCopyPlan(PlanSlice(x.shape(), begin, shape, static_cast<int64_t>(x.element_size())), out.bytes(),
                      x.bytes(), detail::StreamOf(x));
  return TensorList(std::move(out));
}

Tensors Tile(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& repeat_times = attrs.GetInts("repeat_times");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  for (int64_t r : repeat_times) {
    if (r < 0) ThrowInvalid("attrs.repeat_times", "negative entry in " + ShapeToString(repeat_times));
  }
  const size_t rank = std::max(x.shape().size(), repeat_times.size());
  Shape in_shape(rank - x.shape().size(), 1);
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
  Tensor out = detail::NewOut(x, shape, x.dtype());
  detail::RunCopyPlan(PlanTile(in_shape, repeats, static_cast<int64_t>(x.element_size())), out.bytes(), x.bytes(),
                      detail::StreamOf(x));
  return TensorList(std::move(out));
}

Tensors Expand(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target = attrs.GetInts("shape");
  CheckInputs(inputs, true);
  CheckArity(inputs, 1);
  return TensorList(BroadcastTo(inputs[0], target, "attrs.shape"));
}

Tensors ExpandAs(const TensorArgs& inputs, const Attrs& attrs) {
  const std::vector<int64_t>& target_shape = attrs.GetInts("target_shape");
  CheckInputs(inputs, true);
  CheckArity(inputs, 2);
  if (target_shape.empty()) return TensorList(BroadcastTo(inputs[0], inputs[1].shape(), InputField(1, "shape")));
  return TensorList(BroadcastTo(inputs[0], target_shape, "attrs.target_shape"));
}

// ---- triu / tril / tril_triu ----------------------------------------------------------------

template <typename U>
__global__ void TriKernel(const U* x, U* out, int64_t n, int64_t rows, int64_t cols, int64_t diagonal,
                          bool lower) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const int64_t row_index = i / cols;
    const int64_t c = i - row_index * cols;
    const int64_t r = row_index % rows;
    out[i] = TriZero(r, c, diagonal, lower) ? U(0) : x[i];
  }
}

// The CPU's ClampDiagonal: |diagonal| beyond rows + cols changes nothing.
int64_t ClampDiagonal(const TensorArgs& inputs, const Attrs& attrs) {
  if (inputs.size() != 1 || inputs[0].rank() < 2) return 0;
  const Shape& s = inputs[0].shape();
  const int64_t rows = s[s.size() - 2], cols = s.back();
  return std::clamp<int64_t>(attrs.GetInt("diagonal"), -rows - 1, cols + 1);
}

Tensors Tri(const TensorArgs& inputs, const Attrs& attrs, const char* name, bool lower) {
  CheckInputs(inputs, true);
  const int64_t d = ClampDiagonal(inputs, attrs);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  if (x.rank() < 2) ThrowInvalid(InputField(0, "shape"), std::string(name) + " needs rank >= 2");
  const int64_t rows = x.shape()[x.rank() - 2];
  const int64_t cols = x.shape()[x.rank() - 1];
  Tensor out = NewOutput(x, x.shape(), x.dtype());
  const int64_t n = x.numel();
  if (n == 0) return TensorList(std::move(out));
  const LaunchConfig cfg = GridStride(n);
  detail::DispatchUnit(static_cast<int64_t>(x.element_size()), [&](auto u) {
    using U = decltype(u);
    if constexpr (sizeof(U) <= 8) {
      TriKernel<U><<<cfg.grid, cfg.block, 0, detail::StreamOf(x)>>>(
          reinterpret_cast<const U*>(x.bytes()), reinterpret_cast<U*>(out.bytes()), n, rows, cols, d, lower);
      SPMD_CUDA_CHECK_LAUNCH();
    }
  });
  return TensorList(std::move(out));
}

Tensors Triu(const TensorArgs& inputs, const Attrs& attrs) { return Tri(inputs, attrs, "triu", false); }
Tensors Tril(const TensorArgs& inputs, const Attrs& attrs) { return Tri(inputs, attrs, "tril", true); }
Tensors TrilTriu(const TensorArgs& inputs, const Attrs& attrs) {
  const bool lower = attrs.GetBool("lower");
  return Tri(inputs, attrs, "tril_triu", lower);
}

}  // namespace

// The shape ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::reshape{&Reshape, HalfInputs::kNative};
const CudaKernel ops::flatten{&Flatten, HalfInputs::kNative};
const CudaKernel ops::squeeze{&Squeeze, HalfInputs::kNative};
const CudaKernel ops::unsqueeze{&Unsqueeze, HalfInputs::kNative};
const CudaKernel ops::transpose{&Transpose, HalfInputs::kNative};
const CudaKernel ops::split{&Split, HalfInputs::kNative};
const CudaKernel ops::split_with_num{&SplitWithNum, HalfInputs::kNative};
const CudaKernel ops::unbind{&Unbind, HalfInputs::kNative};
const CudaKernel ops::concat{&Concat, HalfInputs::kNative};
const CudaKernel ops::stack{&Stack, HalfInputs::kNative};
const CudaKernel ops::slice{&Slice, HalfInputs::kNative};
const CudaKernel ops::tile{&Tile, HalfInputs::kNative};
const CudaKernel ops::expand{&Expand, HalfInputs::kNative};
const CudaKernel ops::expand_as{&ExpandAs, HalfInputs::kNative};
const CudaKernel ops::triu{&Triu, HalfInputs::kNative};
const CudaKernel ops::tril{&Tril, HalfInputs::kNative};
const CudaKernel ops::tril_triu{&TrilTriu, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
