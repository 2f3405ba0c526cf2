// The indexing and scatter ops' plans (docs/OPS.md "Paddle's other registered ops"):
// one_hot, roll, pad, swiglu, index_select, gather, take_along_axis, put_along_axis, gather_nd,
// scatter, scatter_nd_add, index_put, moe_combine, moe_gate_dispatch.
// Written once for their rules (rules/ops/indexing.cc, rules/ops/scatter.cc), float64
// references (reference/ops_indexing.cc, ops_scatter.cc), CPU kernels
// (kernels/cpu/indexing.cc, scatter.cc) and CUDA kernels (kernels/cuda/indexing.cu,
// scatter.cu): attr reads, validation of shapes and attrs (error type and field) and the
// output shapes. The ids' values are not planned: each backend reads and checks them its
// own way (the CPU ones refuse a bad id, the CUDA ones record an index fault).
// Header-only; no value arithmetic.
//
// Example: gather x [5, 4] with a 0-d index on axis 1 -> out [5]; gather_nd x [4, 6, 2]
// with index [3, 2] -> depth 2, rows 3, slice 2, out [3, 2].
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"
#include "rules/ops/shape_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::indexing_plan {

using Dims = std::vector<int64_t>;

// ---- one_hot ----

struct OneHotPlan {
  int64_t classes = 0;
  Dims out;  // x's shape + [classes]
};

inline OneHotPlan PlanOneHot(const Dims& x, const Attrs& attrs) {
  OneHotPlan p;
  p.classes = attrs.GetInt("num_classes");
  if (p.classes < 1) ThrowInvalid("attrs.num_classes", "num_classes must be >= 1");
  p.out = x;
  p.out.push_back(p.classes);
  return p;
}

// ---- roll ----

// roll along the listed axes (the shifts of a repeated axis add up), or along the
// flattened x when none is listed. The shifts stay as given: each backend takes them
// modulo the sizes itself.
struct RollPlan {
  bool flat = false;      // no axis: x rolls as one [numel] line by shifts[0]
  std::vector<int64_t> axes;  // normalised, one per shift
};

inline RollPlan PlanRoll(const Dims& x, const Attrs& attrs) {
  const std::vector<int64_t>& shifts = attrs.GetInts("shifts");
  const std::vector<int64_t>& axes = attrs.GetInts("axis");
  RollPlan p;
  if (axes.empty()) {
    if (shifts.size() != 1) ThrowInvalid("attrs.shifts", "needs one shift when axis is empty");
    p.flat = true;
    return p;
  }
  if (shifts.size() != axes.size()) ThrowInvalid("attrs.shifts", "needs one shift per axis");
  for (int64_t a : axes) {
    p.axes.push_back(shape::NormalizeAxis(a, static_cast<int64_t>(x.size()), "attrs.axis"));
  }
  return p;
}

// ---- pad ----

// paddings: (before, after) per dim of x, each >= 0. An int64 x needs a pad_value within
// int64's range (its dtype is what the rule does not see: pass nothing there).
inline Dims PlanPad(const Dims& x, const Attrs& attrs, const DType* dtype = nullptr) {
  const std::vector<int64_t>& paddings = attrs.GetInts("paddings");
  const double value = attrs.GetFloat("pad_value");
  if (paddings.size() != 2 * x.size()) {
    ThrowInvalid("attrs.paddings", "needs two entries (before, after) per dim of x");
  }
  Dims out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t before = paddings[2 * d], after = paddings[2 * d + 1];
    if (before < 0 || after < 0) ThrowInvalid("attrs.paddings", "paddings must be >= 0");
    if (__builtin_add_overflow(out[d], before, &out[d]) || __builtin_add_overflow(out[d], after, &out[d])) {
      ThrowInvalid("attrs.paddings", "the padded size overflows");
    }
  }
  if (dtype != nullptr && *dtype == DType::kInt64 && !(std::fabs(value) < 9.0e18)) {
    ThrowInvalid("attrs.pad_value", "out of int64 range");
  }
  return out;
}

// ---- index_select, gather ----

// x viewed as [outer, rows, inner] around `axis`; out as [outer, K, inner] with K the ids
// (one id and no K dim for gather's 0-d index). Localized (local.vocab_start): x holds rows
// [start, start + rows) of the global x along axis; other ids give zero blocks.
struct SelectPlan {
  int64_t axis = 0;
  bool drop_dim = false;  // a 0-d index
  bool sharded = false;
  int64_t start = 0;
  Dims out;
};

inline int64_t LocalRowStart(const Attrs& attrs) {
  const int64_t start = attrs.local().vocab_start.value_or(0);
  if (start < 0) ThrowInvalid(std::string(LocalFieldName(LocalField::kVocabStart)), "negative row offset");
  return start;
}

inline SelectPlan PlanSelect(const Dims& x, const Dims& index, const Attrs& attrs, bool allow_0d) {
  if (x.empty()) ThrowInvalid(shape::InputField(0, "shape"), "x must have rank >= 1");
  SelectPlan p;
  p.axis = shape::NormalizeAxis(attrs.GetInt("axis"), static_cast<int64_t>(x.size()), "attrs.axis");
  p.drop_dim = index.empty();
  if (index.size() > 1 || (p.drop_dim && !allow_0d)) {
    ThrowInvalid(shape::InputField(1, "shape"), "index " + shape::ShapeString(index) + " must be " +
                                                    (allow_0d ? "0-D or 1-D" : "1-D"));
  }
  p.sharded = attrs.local().vocab_start.has_value();
  p.start = LocalRowStart(attrs);
  p.out = x;
  if (p.drop_dim) {
    p.out.erase(p.out.begin() + p.axis);
  } else {
    p.out[p.axis] = index[0];
  }
  return p;
}

inline SelectPlan PlanIndexSelect(const Dims& x, const Dims& index, const Attrs& attrs) {
  return PlanSelect(x, index, attrs, false);
}

inline SelectPlan PlanGather(const Dims& x, const Dims& index, const Attrs& attrs) {
  return PlanSelect(x, index, attrs, true);
}

// ---- take_along_axis ----

// out (index's shape) at position p = x at p with p[axis] replaced by index[p]. index has
// x's rank; off the axis its dims are at most x's (out reads x's leading part there). Ids
// lie in [0, x.shape[axis]) (checked where the values are read).
struct TakeAlongAxisPlan {
  int64_t axis = 0;
  Dims out;
};

// index has x's rank and, off the axis, dims no larger than x's: the positions index names
// (its own elsewhere, its ids along the axis) lie in x. Returns the normalized axis.
inline int64_t CheckAlongAxisIndex(const Dims& x, const Dims& index, const Attrs& attrs) {
  if (x.empty()) ThrowInvalid(shape::InputField(0, "shape"), "x must have rank >= 1");
  const int64_t axis = shape::NormalizeAxis(attrs.GetInt("axis"), static_cast<int64_t>(x.size()), "attrs.axis");
  if (index.size() != x.size()) {
    ThrowInvalid(shape::InputField(1, "shape"), "index " + shape::ShapeString(index) +
                                                    " must have x's rank " + std::to_string(x.size()));
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && index[d] > x[d]) {
      ThrowInvalid(shape::InputField(1, "shape"), "index " + shape::ShapeString(index) +
                                                      " is larger than x " + shape::ShapeString(x) +
                                                      " off the axis (dim " + std::to_string(d) + ")");
    }
  }
  return axis;
}

// The dims of x that take_along_axis reads (put_along_axis writes) across: the axis, and
// every dim where index is smaller than x (positions there are x's leading part, so a
// shard of either would meet the other's elements at different positions).
inline std::vector<bool> AlongAxisWholeDims(const Dims& x, const Dims& index, int64_t axis) {
  std::vector<bool> whole(x.size());
  for (size_t d = 0; d < x.size(); ++d) whole[d] = static_cast<int64_t>(d) == axis || index[d] != x[d];
  return whole;
}

inline TakeAlongAxisPlan PlanTakeAlongAxis(const Dims& x, const Dims& index, const Attrs& attrs) {
  TakeAlongAxisPlan p;
  p.axis = CheckAlongAxisIndex(x, index, attrs);
  p.out = index;
  return p;
}

// ---- put_along_axis ----

// out = x, then each value written at index's position along axis (its own position
// elsewhere, the same as take_along_axis reads). assign overwrites (of ids repeated along
// the axis the last wins); the other modes reduce, at each position some value lands on,
// x's element (include_self) and every value landing there: add sums, mul multiplies,
// mean divides the sum by their count, amin and amax keep the least and the greatest
// (NaN if any is NaN). A position no value lands on keeps x's element.
enum class PutReduce { kAssign, kAdd, kMul, kMean, kMin, kMax };

struct PutAlongAxisPlan {  // out has x's shape
  int64_t axis = 0;
  PutReduce reduce = PutReduce::kAssign;
  bool include_self = true;
};

// Paddle's names for the modes ("multiply" is mul's other spelling).
inline PutReduce ParsePutReduce(const std::string& reduce) {
  static const std::pair<const char*, PutReduce> kNames[] = {
      {"assign", PutReduce::kAssign}, {"add", PutReduce::kAdd}, {"mul", PutReduce::kMul},
      {"multiply", PutReduce::kMul},  {"mean", PutReduce::kMean}, {"amin", PutReduce::kMin},
      {"amax", PutReduce::kMax}};
  for (const auto& [name, mode] : kNames) {
    if (reduce == name) return mode;
  }
  ThrowInvalid("attrs.reduce",
               "reduce must be assign, add, mul, multiply, mean, amin or amax, got \"" + reduce + "\"");
}

inline PutAlongAxisPlan PlanPutAlongAxis(const Dims& x, const Dims& index, const Dims& value, const Attrs& attrs) {
  PutAlongAxisPlan p;
  p.reduce = ParsePutReduce(attrs.GetString("reduce"));
  p.include_self = attrs.GetBool("include_self");
  p.axis = CheckAlongAxisIndex(x, index, attrs);
  if (value != index) {
    ThrowInvalid(shape::InputField(2, "shape"), "value " + shape::ShapeString(value) + " must have index's shape " +
                                                    shape::ShapeString(index));
  }
  return p;
}

// ---- moe_combine ----

// x [rows, hidden] (the experts' outputs, one row per routed token copy), combine_weights
// and scatter_index [tokens, k]: each token's output row is the weighted sum of the k rows
// of x its ids name, y [tokens, hidden].
struct MoeCombinePlan {
  int64_t rows = 0, hidden = 0, tokens = 0, k = 0;
  Dims out;
};

inline MoeCombinePlan PlanMoeCombine(const Dims& x, const Dims& weights, const Dims& index) {
  if (x.size() != 2) {
    ThrowInvalid(shape::InputField(0, "shape"), "x must be [rows, hidden], got " + shape::ShapeString(x));
  }
  if (weights.size() != 2) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "combine_weights must be [tokens, k], got " + shape::ShapeString(weights));
  }
  if (index != weights) {
    ThrowInvalid(shape::InputField(2, "shape"), "scatter_index " + shape::ShapeString(index) +
                                                    " must have combine_weights' shape " + shape::ShapeString(weights));
  }
  MoeCombinePlan p;
  p.rows = x[0];
  p.hidden = x[1];
  p.tokens = weights[0];
  p.k = weights[1];
  p.out = {p.tokens, p.hidden};
  return p;
}

// ---- moe_gate_dispatch ----

// x [tokens, hidden], gate_logits [tokens, experts] (Paddle passes probabilities), corr_bias
// [experts] or 0-d (absent); attrs k (1 <= k <= experts), capacity (>= 0), use_pad (only
// true). Outputs y [experts, capacity, hidden], combine_weights [tokens, k], scatter_index
// [k, tokens], expert_offset [experts], expert_id [tokens, k]. The routing itself (which
// experts, which slots) depends on the values and is each backend's own loop.
struct MoeGateDispatchPlan {
  int64_t tokens = 0, hidden = 0, experts = 0, k = 0, capacity = 0;
  bool has_bias = false;
  std::vector<Dims> outs;  // y, combine_weights, scatter_index, expert_offset, expert_id
};

inline MoeGateDispatchPlan PlanMoeGateDispatch(const Dims& x, const Dims& gate, const Dims& bias,
                                               const Attrs& attrs) {
  if (x.size() != 2) {
    ThrowInvalid(shape::InputField(0, "shape"), "x must be [tokens, hidden], got " + shape::ShapeString(x));
  }
  if (gate.size() != 2 || gate[0] != x[0]) {
    ThrowInvalid(shape::InputField(1, "shape"), "gate_logits must be [" + std::to_string(x[0]) +
                                                    ", experts] (x's tokens), got " + shape::ShapeString(gate));
  }
  MoeGateDispatchPlan p;
  p.tokens = x[0];
  p.hidden = x[1];
  p.experts = gate[1];
  p.has_bias = !bias.empty();
  if (p.has_bias && bias != Dims{p.experts}) {
    ThrowInvalid(shape::InputField(2, "shape"), "corr_bias must be [" + std::to_string(p.experts) +
                                                    "] or 0-d (absent), got " + shape::ShapeString(bias));
  }
  if (!attrs.GetBool("use_pad")) {
    ThrowUnsupported("attrs.use_pad", "only use_pad true (y padded to [experts, capacity, hidden]) is supported");
  }
  p.k = attrs.GetInt("k");
  if (p.k < 1 || p.k > p.experts) {
    ThrowInvalid("attrs.k", "k " + std::to_string(p.k) + " outside [1, " + std::to_string(p.experts) + "] (experts)");
  }
  p.capacity = attrs.GetInt("capacity");
  // A slot id e * capacity + c must stay an exact int64 (and a double's integer).
  constexpr int64_t kMaxSlots = int64_t{1} << 52;
  if (p.capacity < 0 || (p.capacity > 0 && p.experts > kMaxSlots / p.capacity)) {
    ThrowInvalid("attrs.capacity", "capacity " + std::to_string(p.capacity) + " outside [0, 2^52 / " +
                                       std::to_string(p.experts) + "] (experts * capacity slots)");
  }
  p.outs = {{p.experts, p.capacity, p.hidden}, {p.tokens, p.k}, {p.k, p.tokens}, {p.experts}, {p.tokens, p.k}};
  return p;
}

// ---- gather_nd, scatter_nd_add ----

// index [..., depth] addresses x's first `depth` dims: x viewed as [slices, slice] with
// slices = prod(x[:depth]), one index row (rows = prod(index[:-1])) picks one slice.
struct NdPlan {
  int64_t depth = 0, rows = 0, slices = 0, slice = 0;
  Dims gathered;  // index[:-1] + x[depth:]: gather_nd's out, scatter_nd_add's updates
};

inline NdPlan PlanNd(const Dims& x, const Dims& index) {
  if (index.empty()) ThrowInvalid(shape::InputField(1, "shape"), "index must have rank >= 1");
  NdPlan p;
  p.depth = index.back();
  if (p.depth < 0 || p.depth > static_cast<int64_t>(x.size())) {
    ThrowInvalid(shape::InputField(1, "shape"), "index " + shape::ShapeString(index) +
                                                    " addresses more dims than x " + shape::ShapeString(x));
  }
  p.gathered.assign(index.begin(), index.end() - 1);
  p.gathered.insert(p.gathered.end(), x.begin() + p.depth, x.end());
  p.rows = p.slices = p.slice = 1;
  for (size_t d = 0; d + 1 < index.size(); ++d) p.rows *= index[d];
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) (d < p.depth ? p.slices : p.slice) *= x[d];
  return p;
}

inline NdPlan PlanGatherNd(const Dims& x, const Dims& index) { return PlanNd(x, index); }

inline NdPlan PlanScatterNdAdd(const Dims& x, const Dims& index, const Dims& updates) {
  const NdPlan p = PlanNd(x, index);
  if (updates != p.gathered) {
    ThrowInvalid(shape::InputField(2, "shape"), "updates " + shape::ShapeString(updates) + " must be " +
                                                    shape::ShapeString(p.gathered));
  }
  return p;
}

// ---- scatter ----

// x's rows (dim 0) listed by a 1-D index get the rows of updates [K, x[1:]...], added or
// overwritten. Localized (local.vocab_start) as index_select.
struct ScatterPlan {
  bool overwrite = false;
  bool sharded = false;
  int64_t start = 0;
  int64_t rows = 0;  // x[0]
};

inline ScatterPlan PlanScatter(const Dims& x, const Dims& index, const Dims& updates, const Attrs& attrs) {
  ScatterPlan p;
  p.overwrite = attrs.GetBool("overwrite");
  if (x.empty()) ThrowInvalid(shape::InputField(0, "shape"), "x must have rank >= 1");
  if (index.size() != 1) ThrowInvalid(shape::InputField(1, "shape"), "index must be 1-D");
  Dims expected = x;
  expected[0] = index[0];
  if (updates != expected) {
    ThrowInvalid(shape::InputField(2, "shape"), "updates " + shape::ShapeString(updates) + " must be " +
                                                    shape::ShapeString(expected));
  }
  p.sharded = attrs.local().vocab_start.has_value();
  p.start = LocalRowStart(attrs);
  p.rows = x[0];
  return p;
}

// ---- index_put ----

// inputs x, indices[0..k), value (k >= 1 index tensors, k <= rank(x)): the indices
// broadcast together (numpy's rules) to `broadcast` B; out = x with
// out[i0[b], ..., i{k-1}[b], t...] = value[b, t...] (accumulate: +=), value broadcastable to
// B + x.shape[k:] (`written`). Index ids lie in [-n, n) for x's dim n (negative ones wrap
// once); they are the backends' to check. Bool masks are Unsupported: their positions depend
// on the values (the dtypes, when given, are checked: the rule does not see them).
struct IndexPutPlan {
  int64_t k = 0;
  bool accumulate = false;
  Dims broadcast;  // B
  Dims written;    // B + x.shape[k:]
  Dims out;        // x's shape
};

inline IndexPutPlan PlanIndexPut(const std::vector<Dims>& shapes, const Attrs& attrs,
                                 const std::vector<DType>* dtypes = nullptr) {
  IndexPutPlan p;
  p.accumulate = attrs.GetBool("accumulate");
  if (shapes.size() < 3) {
    ThrowInvalid("inputs", "index_put takes x, 1 or more index tensors and value; got " +
                               std::to_string(shapes.size()) + " inputs");
  }
  const Dims& x = shapes[0];
  p.k = static_cast<int64_t>(shapes.size()) - 2;
  if (p.k > static_cast<int64_t>(x.size())) {
    ThrowInvalid(shape::InputField(0, "shape"), "x " + shape::ShapeString(x) + " has fewer dims than the " +
                                                    std::to_string(p.k) + " index tensors");
  }
  for (size_t j = 1; j + 1 < shapes.size(); ++j) {
    if (dtypes != nullptr && j < dtypes->size() && (*dtypes)[j] == DType::kBool) {
      ThrowUnsupported(shape::InputField(j, "dtype"), "bool mask indices are not provided (int64 ids are)");
    }
    if (shapes[j].size() > p.broadcast.size()) {
      p.broadcast.insert(p.broadcast.begin(), shapes[j].size() - p.broadcast.size(), 1);
    }
  }
  for (size_t j = 1; j + 1 < shapes.size(); ++j) {
    const size_t offset = p.broadcast.size() - shapes[j].size();
    for (size_t d = 0; d < shapes[j].size(); ++d) {
      int64_t& b = p.broadcast[offset + d];
      const int64_t s = shapes[j][d];
      if (s == b || s == 1) continue;
      if (b != 1) {
        ThrowInvalid(shape::InputField(j, "shape"), "index " + shape::ShapeString(shapes[j]) +
                                                        " does not broadcast with the other indices (dim " +
                                                        std::to_string(d) + ")");
      }
      b = s;
    }
  }
  p.written = p.broadcast;
  p.written.insert(p.written.end(), x.begin() + p.k, x.end());
  const Dims& value = shapes.back();
  const size_t value_at = shapes.size() - 1;
  bool fits = value.size() <= p.written.size();
  for (size_t d = 0; fits && d < value.size(); ++d) {
    const int64_t w = p.written[p.written.size() - value.size() + d];
    fits = value[d] == w || value[d] == 1;
  }
  if (!fits) {
    ThrowInvalid(shape::InputField(value_at, "shape"), "value " + shape::ShapeString(value) +
                                                          " does not broadcast to the written " +
                                                          shape::ShapeString(p.written));
  }
  p.out = x;
  return p;
}

}  // namespace spmd::indexing_plan
