// The shape ops' plans (docs/OPS.md "Shape ops"), written once for their rules
// (rules/ops/shape.cc, rules/engine/dimtrans.cc), float64 references (reference/ops_shape.cc), CPU
// kernels (kernels/cpu/shape.cc) and CUDA kernels (kernels/cuda/shape.cu): the attr reads,
// the validation (error type and field) and the output shapes, plus the index plan the
// copy loops need (the split sizes, the slice's begin and step, the tile's padded shapes). They
// only move values, so a plan holds no value arithmetic at all. Header-only.
//
// Every Plan* takes the input shapes (and dtypes where the op checks them) after the
// caller's arity check and throws SpmdError naming the attr or input at fault: the same
// request gets the same verdict in all four places.
//
// Example: reshape x [2, 3, 4] with shape [0, -1] -> [2, 12]; split x [5, 6] with
// sections [2, -1] on axis 0 -> sizes [2, 3]; slice x [4, 6] with axes [1], starts [-4],
// ends [100] -> begin [0, 2], sliced [4, 4]; strided_slice of that x with axes [1], starts
// [-1], ends [-100], strides [-3] -> begin [0, 5], step [1, -3], sliced [4, 2] (x[:, 5::-3]).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::shape_plan {

using Dims = std::vector<int64_t>;

// The most outputs one split, split_with_num or unbind makes. Each output is a tensor of
// its own; a caller asking for more is hostile or mistaken, and answering it costs time
// per output (Unsupported, SEMANTICS.md §10).
inline constexpr int64_t kMaxSplitOutputs = 4096;

// The most elements a planned shape may hold (the kernels' byte limit then applies too).
inline constexpr int64_t kMaxElements = int64_t{1} << 62;

// InvalidArgument(field) for a negative dim or more than kMaxElements elements.
inline void CheckElements(const Dims& shape, const std::string& field) {
  for (int64_t d : shape) {
    if (d < 0) ThrowInvalid(field, "negative dim in " + shape::ShapeString(shape));
  }
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d == 0) continue;  // every dim is bounded, so the products cannot overflow
    if (product > kMaxElements / d) {
      ThrowInvalid(field, "too many elements in " + shape::ShapeString(shape));
    }
    product *= d;
  }
}

// A localized shape attr (a shard's shape) is literal: 0 is an empty dim, not "copy".
inline bool LocalExact(const Attrs& attrs) { return attrs.local().exact.value_or(false); }

// As shape::NormalizeAxis, but a 0-d x accepts 0 and -1 (Paddle's scalar case) and gets 0:
// x is then seen as [1] along that axis. (shape::NormalizeAxisOrScalar returns -1 there:
// "no dim to act on".)
inline int64_t NormalizeAxisOfScalarAsZero(int64_t axis, int64_t rank, const std::string& field) {
  if (rank == 0) {
    if (axis != 0 && axis != -1) {
      ThrowInvalid(field, "axis " + std::to_string(axis) + " out of range for a 0-d tensor");
    }
    return 0;
  }
  return shape::NormalizeAxis(axis, rank, field);
}

// y (input 1) must have x's shape: swiglu, fused_dropout_add.
inline void CheckSameShape(const Dims& x, const Dims& y) {
  if (y != x) {
    ThrowInvalid(shape::InputField(1, "shape"), "y " + shape::ShapeString(y) + " != x " + shape::ShapeString(x));
  }
}

// ---- reshape, flatten, squeeze, unsqueeze: the output shape (the same elements) ----

// Paddle's reshape target: 0 copies x's dim at that position (unless `exact`), one -1 is
// inferred from the element count. Throws InvalidArgument(field).
inline Dims ResolveReshapeTarget(const Dims& x, const Dims& target, bool exact, const std::string& field) {
  Dims shape(target.size());
  int64_t inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t s = target[i];
    if (s == 0 && !exact) {
      if (i >= x.size()) {
        ThrowInvalid(field, "0 at position " + std::to_string(i) + " but x " + shape::ShapeString(x) +
                                " has no such dim");
      }
      s = x[i];
    } else if (s == -1) {
      if (inferred >= 0) ThrowInvalid(field, "more than one -1 in " + shape::ShapeString(target));
      inferred = static_cast<int64_t>(i);
      continue;
    } else if (s < -1) {
      ThrowInvalid(field, "negative size in " + shape::ShapeString(target));
    }
    shape[i] = s;
  }
  CheckElements(shape, field);  // the listed sizes cannot overflow
  int64_t known = 1, numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<int64_t>(i) != inferred) known *= shape[i];
  }
  for (int64_t s : x) numel *= s;
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      ThrowInvalid(field, "cannot infer -1 in " + shape::ShapeString(target) + " for x " +
                              shape::ShapeString(x));
    }
    shape[inferred] = numel / known;
  } else if (known != numel) {
    ThrowInvalid(field, shape::ShapeString(target) + " does not hold the " + std::to_string(numel) +
                            " elements of x " + shape::ShapeString(x));
  }
  return shape;
}

inline Dims PlanReshape(const Dims& x, const Attrs& attrs) {
  return ResolveReshapeTarget(x, attrs.GetInts("shape"), LocalExact(attrs), "attrs.shape");
}

// flatten merges dims [start_axis, stop_axis] into one; a 0-d x becomes [1].
struct FlattenPlan {
  int64_t start = 0, stop = 0;  // normalised; both 0 for a 0-d x
  Dims out;
};

inline FlattenPlan PlanFlatten(const Dims& x, const Attrs& attrs) {
  const int64_t start_attr = attrs.GetInt("start_axis");
  const int64_t stop_attr = attrs.GetInt("stop_axis");
  const int64_t rank = static_cast<int64_t>(x.size());
  FlattenPlan p;
  p.start = NormalizeAxisOfScalarAsZero(start_attr, rank, "attrs.start_axis");
  p.stop = NormalizeAxisOfScalarAsZero(stop_attr, rank, "attrs.stop_axis");
  if (rank == 0) {
    p.out = {1};
    return p;
  }
  if (p.start > p.stop) {
    ThrowInvalid("attrs.start_axis", "start_axis " + std::to_string(start_attr) + " is after stop_axis " +
                                         std::to_string(stop_attr));
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (d <= p.start || d > p.stop) {
      p.out.push_back(x[d]);
    } else {
      p.out.back() *= x[d];
    }
  }
  return p;
}

// squeeze drops the listed dims of size 1 (every size-1 dim when none is listed). When
// localized (exact) exactly the listed dims go, and each must be 1.
struct SqueezePlan {
  std::vector<bool> drop;  // per x dim
  Dims out;
};

inline SqueezePlan PlanSqueeze(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  const int64_t rank = static_cast<int64_t>(x.size());
  const bool exact = LocalExact(attrs);
  std::vector<bool> listed(x.size(), axis.empty() && !exact);
  for (int64_t a : axis) {
    const int64_t d = NormalizeAxisOfScalarAsZero(a, rank, "attrs.axis");
    if (rank == 0) continue;
    listed[d] = true;
    if (exact && x[d] != 1) {
      ThrowInvalid("attrs.axis", "dim " + std::to_string(a) + " of " + shape::ShapeString(x) + " is not 1");
    }
  }
  SqueezePlan p;
  p.drop.assign(x.size(), false);
  for (size_t d = 0; d < x.size(); ++d) {
    p.drop[d] = listed[d] && x[d] == 1;
    if (!p.drop[d]) p.out.push_back(x[d]);
  }
  return p;
}

// unsqueeze inserts size-1 dims at the listed positions of the output.
struct UnsqueezePlan {
  std::vector<bool> added;  // per output dim
  Dims out;
};

inline UnsqueezePlan PlanUnsqueeze(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& axis = attrs.GetInts("axis");
  const int64_t out_rank = static_cast<int64_t>(x.size() + axis.size());
  UnsqueezePlan p;
  p.added.assign(static_cast<size_t>(out_rank), false);
  for (int64_t a : axis) {
    const int64_t d = shape::NormalizeAxis(a, out_rank, "attrs.axis");
    if (p.added[d]) ThrowInvalid("attrs.axis", "position " + std::to_string(a) + " listed twice");
    p.added[d] = true;
  }
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) p.out.push_back(p.added[d] ? 1 : x[next++]);
  return p;
}

// ---- transpose ----

struct TransposePlan {
  std::vector<int64_t> perm;  // out dim d is x dim perm[d], normalised
  Dims out;
};

inline TransposePlan PlanTranspose(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& perm_attr = attrs.GetInts("perm");
  const int64_t rank = static_cast<int64_t>(x.size());
  if (static_cast<int64_t>(perm_attr.size()) != rank) {
    ThrowInvalid("attrs.perm", shape::ShapeString(perm_attr) + " is not a permutation of rank " +
                                   std::to_string(rank));
  }
  TransposePlan p;
  std::vector<bool> used(perm_attr.size(), false);
  for (int64_t a : perm_attr) {
    const int64_t d = shape::NormalizeAxis(a, rank, "attrs.perm");
    if (used[d]) ThrowInvalid("attrs.perm", shape::ShapeString(perm_attr) + " is not a permutation");
    used[d] = true;
    p.perm.push_back(d);
    p.out.push_back(x[d]);
  }
  return p;
}

// ---- split, split_with_num, unbind: pieces of x along one axis ----

struct SplitPlan {
  int64_t axis = 0;    // normalised
  Dims sizes;          // the pieces' sizes along axis, summing to x[axis]
  bool drop_axis = false;  // unbind: each piece loses the axis
  Dims PieceShape(const Dims& x, size_t i) const {
    Dims s = x;
    if (drop_axis) {
      s.erase(s.begin() + axis);
    } else {
      s[axis] = sizes[i];
    }
    return s;
  }
};

inline void CheckSplitOutputs(int64_t count, const std::string& field) {
  if (count > kMaxSplitOutputs) {
    ThrowUnsupported(field, "split into " + std::to_string(count) + " outputs (at most " +
                                std::to_string(kMaxSplitOutputs) + ")");
  }
}

// sections: the pieces' sizes, one of them -1 (inferred) at most.
inline SplitPlan PlanSplit(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& sections = attrs.GetInts("sections");
  SplitPlan p;
  p.axis = shape::NormalizeAxis(attrs.GetInt("axis"), static_cast<int64_t>(x.size()), "attrs.axis");
  const int64_t size = x[p.axis];
  const std::string field = "attrs.sections";
  if (sections.empty()) ThrowInvalid(field, "no sections");
  CheckSplitOutputs(static_cast<int64_t>(sections.size()), field);
  p.sizes = sections;
  int64_t inferred = -1;
  int64_t known = 0;  // the sum of the given sizes, kept <= size
  auto mismatch = [&]() {
    ThrowInvalid(field, shape::ShapeString(sections) + " does not sum to dim " + std::to_string(size) +
                            " of x " + shape::ShapeString(x));
  };
  for (size_t i = 0; i < p.sizes.size(); ++i) {
    if (p.sizes[i] == -1) {
      if (inferred >= 0) ThrowInvalid(field, "more than one -1 in " + shape::ShapeString(sections));
      inferred = static_cast<int64_t>(i);
    } else if (p.sizes[i] < 0) {
      ThrowInvalid(field, "negative section in " + shape::ShapeString(sections));
    } else if (p.sizes[i] > size - known) {
      mismatch();
    } else {
      known += p.sizes[i];
    }
  }
  if (inferred >= 0) {
    p.sizes[inferred] = size - known;
  } else if (known != size) {
    mismatch();
  }
  return p;
}

inline SplitPlan PlanSplitWithNum(const Dims& x, const Attrs& attrs) {
  const int64_t num = attrs.GetInt("num");
  SplitPlan p;
  p.axis = shape::NormalizeAxis(attrs.GetInt("axis"), static_cast<int64_t>(x.size()), "attrs.axis");
  const int64_t size = x[p.axis];
  CheckSplitOutputs(num, "attrs.num");
  if (num <= 0 || size % num != 0) {
    ThrowInvalid("attrs.num", "dim " + std::to_string(size) + " of x " + shape::ShapeString(x) +
                                  " does not split into " + std::to_string(num) + " equal pieces");
  }
  p.sizes.assign(static_cast<size_t>(num), size / num);
  return p;
}

inline SplitPlan PlanUnbind(const Dims& x, const Attrs& attrs) {
  SplitPlan p;
  p.axis = shape::NormalizeAxis(attrs.GetInt("axis"), static_cast<int64_t>(x.size()), "attrs.axis");
  CheckSplitOutputs(x[p.axis], shape::InputField(0, "shape"));
  p.sizes.assign(static_cast<size_t>(x[p.axis]), 1);
  p.drop_axis = true;
  return p;
}

// ---- concat, stack ----

// Checks that the inputs after the first share its dtype (the output keeps it).
inline void CheckSameDType(const std::vector<DType>& dtypes) {
  for (size_t i = 1; i < dtypes.size(); ++i) {
    if (dtypes[i] != dtypes[0]) {
      ThrowInvalid(shape::InputField(i, "dtype"), std::string(ToString(dtypes[i])) + " differs from " +
                                                      std::string(ToString(dtypes[0])) + " of inputs[0]");
    }
  }
}

struct ConcatPlan {
  int64_t axis = 0;  // normalised: concat's axis of x, stack's new axis of the output
  Dims out;
};

// concat joins inputs of one rank, equal but on `axis`, along it.
inline ConcatPlan PlanConcat(const std::vector<Dims>& shapes, const std::vector<DType>& dtypes,
                             const Attrs& attrs) {
  const Dims& first = shapes[0];
  const int64_t rank = static_cast<int64_t>(first.size());
  ConcatPlan p;
  p.axis = shape::NormalizeAxis(attrs.GetInt("axis"), rank, "attrs.axis");  // a 0-d x has no axis
  p.out = first;
  p.out[p.axis] = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Dims expect = first;
    expect[p.axis] = static_cast<int64_t>(shapes[i].size()) == rank ? shapes[i][p.axis] : 0;
    if (shapes[i] != expect) {
      ThrowInvalid(shape::InputField(i, "shape"), shape::ShapeString(shapes[i]) + " does not concat with " +
                                                      shape::ShapeString(first) + " on axis " +
                                                      std::to_string(p.axis));
    }
    if (p.out[p.axis] > kMaxElements - shapes[i][p.axis]) {
      ThrowInvalid(shape::InputField(i, "shape"), "the concatenated dim is too large");
    }
    p.out[p.axis] += shapes[i][p.axis];
  }
  CheckSameDType(dtypes);
  CheckElements(p.out, "outputs");
  return p;
}

// stack joins inputs of one shape along a new dim `axis` of the output.
inline ConcatPlan PlanStack(const std::vector<Dims>& shapes, const std::vector<DType>& dtypes,
                            const Attrs& attrs) {
  const Dims& first = shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] != first) {
      ThrowInvalid(shape::InputField(i, "shape"), shape::ShapeString(shapes[i]) + " != " +
                                                      shape::ShapeString(first) + " of inputs[0]");
    }
  }
  ConcatPlan p;
  p.axis = shape::NormalizeAxis(attrs.GetInt("axis"), static_cast<int64_t>(first.size()) + 1, "attrs.axis");
  CheckSameDType(dtypes);
  p.out = first;
  p.out.insert(p.out.begin() + p.axis, static_cast<int64_t>(shapes.size()));
  CheckElements(p.out, "outputs");
  return p;
}

// ---- slice, strided_slice ----

struct SlicePlan {
  Dims begin;   // per x dim, the first element taken (0 where none is)
  Dims step;    // per x dim, from one element taken to the next: 1 for slice, < 0 walks back
  Dims sliced;  // per x dim, how many are taken (x's rank)
  std::vector<bool> listed;  // per x dim: named in axes (sliced, maybe keeping every element)
  std::vector<bool> drop;  // per x dim: decrease_axis removes it (its size is 1)
  Dims out;     // sliced without the dropped dims
};

// One dim of size `size` sliced as Python's x[start:end:step] (step != 0): a negative
// start or end counts from the end, then both are clamped to [0, size] for a positive step
// and to [-1, size - 1] for a negative one (-1: before the first element). Sets the dim's
// begin and count in `p`.
inline void PlanSliceDim(SlicePlan& p, size_t d, int64_t start, int64_t end, int64_t step, int64_t size) {
  const int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? size : size - 1;
  auto clamp = [&](int64_t v) {
    if (v < 0) v += size;  // no overflow: size >= 0
    return v < lo ? lo : (v > hi ? hi : v);
  };
  const int64_t s = clamp(start), e = clamp(end);
  // The elements s, s + step, ... short of e. (gap - 1) / step truncates toward zero, so a
  // negative step (the most negative one too) is never negated.
  const int64_t gap = step > 0 ? e - s : s - e;
  const int64_t count = gap <= 0 ? 0 : (step > 0 ? 1 + (gap - 1) / step : 1 - (gap - 1) / step);
  p.begin[d] = count > 0 ? s : 0;
  p.step[d] = step;
  p.sliced[d] = count;
}

// The axes, starts, ends (and strides, when given) of slice and strided_slice: one entry
// per listed axis, each axis listed once (negative ones count from the end).
inline SlicePlan PlanSliceAxes(const Dims& x, const std::vector<int64_t>& axes, const std::vector<int64_t>& starts,
                               const std::vector<int64_t>& ends, const std::vector<int64_t>* strides) {
  const int64_t rank = static_cast<int64_t>(x.size());
  auto check_length = [&](const std::vector<int64_t>& v, const char* field) {
    if (v.size() != axes.size()) {
      ThrowInvalid(field, "has " + std::to_string(v.size()) + " entries, axes has " + std::to_string(axes.size()));
    }
  };
  check_length(starts, "attrs.starts");
  check_length(ends, "attrs.ends");
  if (strides != nullptr) check_length(*strides, "attrs.strides");
  SlicePlan p;
  p.begin.assign(x.size(), 0);
  p.step.assign(x.size(), 1);
  p.sliced = x;
  p.listed.assign(x.size(), false);
  for (size_t j = 0; j < axes.size(); ++j) {
    const int64_t d = shape::NormalizeAxis(axes[j], rank, "attrs.axes");
    if (p.listed[d]) ThrowInvalid("attrs.axes", "axis " + std::to_string(axes[j]) + " listed twice");
    p.listed[d] = true;
    const int64_t step = strides != nullptr ? (*strides)[j] : 1;
    if (step == 0) ThrowInvalid("attrs.strides", "entry " + std::to_string(j) + " is 0 (a step must not be 0)");
    PlanSliceDim(p, static_cast<size_t>(d), starts[j], ends[j], step, x[d]);
  }
  p.drop.assign(x.size(), false);
  return p;
}

// slice: Python-style starts / ends, step 1; decrease_axis drops listed size-1 dims.
inline SlicePlan PlanSlice(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& axes = attrs.GetInts("axes");
  const std::vector<int64_t>& starts = attrs.GetInts("starts");
  const std::vector<int64_t>& ends = attrs.GetInts("ends");
  (void)attrs.GetInts("infer_flags");  // Paddle's marker for runtime-valued starts/ends
  const std::vector<int64_t>& decrease_axis = attrs.GetInts("decrease_axis");
  const int64_t rank = static_cast<int64_t>(x.size());
  SlicePlan p = PlanSliceAxes(x, axes, starts, ends, nullptr);
  for (int64_t a : decrease_axis) {
    const int64_t d = shape::NormalizeAxis(a, rank, "attrs.decrease_axis");
    if (p.drop[d]) ThrowInvalid("attrs.decrease_axis", "axis " + std::to_string(a) + " listed twice");
    if (p.sliced[d] != 1) {
      ThrowInvalid("attrs.decrease_axis", "dim " + std::to_string(a) + " has size " +
                                              std::to_string(p.sliced[d]) + " after slicing, not 1");
    }
    p.drop[d] = true;
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (!p.drop[d]) p.out.push_back(p.sliced[d]);
  }
  return p;
}

// strided_slice: out takes x[start:end:stride] on each listed axis (Python's slice, a
// negative stride walking back); a stride of 0 is InvalidArgument (attrs.strides).
inline SlicePlan PlanStridedSlice(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& strides = attrs.GetInts("strides");
  SlicePlan p = PlanSliceAxes(x, attrs.GetInts("axes"), attrs.GetInts("starts"), attrs.GetInts("ends"), &strides);
  p.out = p.sliced;
  return p;
}

// ---- tile ----

struct TilePlan {
  Dims in_shape;  // x left-padded with 1 to the output's rank
  Dims repeats;   // repeat_times left-padded with 1
  Dims out;       // in_shape * repeats
};

inline TilePlan PlanTile(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& repeat_times = attrs.GetInts("repeat_times");
  const std::string field = "attrs.repeat_times";
  for (int64_t r : repeat_times) {
    if (r < 0) ThrowInvalid(field, "negative entry in " + shape::ShapeString(repeat_times));
  }
  const size_t rank = std::max(x.size(), repeat_times.size());
  TilePlan p;
  p.in_shape.assign(rank - x.size(), 1);
  p.in_shape.insert(p.in_shape.end(), x.begin(), x.end());
  p.repeats.assign(rank - repeat_times.size(), 1);
  p.repeats.insert(p.repeats.end(), repeat_times.begin(), repeat_times.end());
  p.out.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (p.repeats[d] != 0 && p.in_shape[d] > kMaxElements / p.repeats[d]) {
      ThrowInvalid(field, "output too large");
    }
    p.out[d] = p.in_shape[d] * p.repeats[d];
  }
  CheckElements(p.out, field);
  return p;
}

// ---- expand, expand_as ----

// x broadcast to `target` (right-aligned; -1 keeps x's dim; new leading dims >= 0).
// Errors name `field`.
inline Dims BroadcastTarget(const Dims& x, const Dims& target, const std::string& field) {
  if (target.size() < x.size()) {
    ThrowInvalid(field, shape::ShapeString(target) + " has fewer dims than x " + shape::ShapeString(x));
  }
  const size_t lead = target.size() - x.size();
  Dims out(target.size());
  for (size_t d = 0; d < target.size(); ++d) {
    int64_t t = target[d];
    if (d < lead) {
      if (t < 0) ThrowInvalid(field, "new leading dim " + std::to_string(t) + " must be >= 0");
      out[d] = t;
      continue;
    }
    const int64_t have = x[d - lead];
    if (t == -1) t = have;
    if (t < 0 || (have != t && have != 1)) {
      ThrowInvalid(field, "cannot expand " + shape::ShapeString(x) + " to " + shape::ShapeString(target));
    }
    out[d] = t;
  }
  CheckElements(out, field);
  return out;
}

inline Dims PlanExpand(const Dims& x, const Attrs& attrs) {
  return BroadcastTarget(x, attrs.GetInts("shape"), "attrs.shape");
}

// The target is attrs.target_shape, or y's shape when that is empty.
inline Dims PlanExpandAs(const Dims& x, const Dims& y, const Attrs& attrs) {
  const std::vector<int64_t>& target_shape = attrs.GetInts("target_shape");
  if (target_shape.empty()) return BroadcastTarget(x, y, shape::InputField(1, "shape"));
  return BroadcastTarget(x, target_shape, "attrs.target_shape");
}

// ---- triu, tril, tril_triu ----

// triu keeps x where col - row >= diagonal, tril where col - row <= diagonal, over x's
// last two dims [rows, cols].
struct TrianglePlan {
  int64_t rows = 0, cols = 0;
  int64_t diagonal = 0;  // clamped to [-rows - 1, cols + 1]: beyond changes nothing, and
                         // row + diagonal cannot overflow
  bool lower = false;    // tril
};

inline TrianglePlan PlanTriangle(const Dims& x, const Attrs& attrs, const std::string& name, bool lower) {
  if (x.size() < 2) ThrowInvalid(shape::InputField(0, "shape"), name + " needs rank >= 2");
  TrianglePlan p;
  p.rows = x[x.size() - 2];
  p.cols = x.back();
  p.diagonal = std::clamp<int64_t>(attrs.GetInt("diagonal"), -p.rows - 1, p.cols + 1);
  p.lower = lower;
  return p;
}

}  // namespace spmd::shape_plan
