// Index-driven reads and writes (docs/OPS.md "Paddle's other registered ops"): gather_nd,
// scatter, scatter_nd_add, put_along_axis, index_put. Plain loops over multi-indices, from the definitions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/indexing_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;
using internal::InputField;

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
  const indexing_plan::NdPlan plan = indexing_plan::PlanGatherNd(x.shape, index.shape);
  Tensor out = internal::Zeros(plan.gathered, x.dtype);
  const int64_t slice = plan.slice;
  for (int64_t r = 0; r < plan.rows; ++r) {
    const int64_t offset = SliceOffset(x, index, r, plan.depth);
    for (int64_t t = 0; t < slice; ++t) out.data[r * slice + t] = x.data[offset + t];
  }
  return {out};
}

// out = x; overwrite: out[index[i]] = updates[i] in order; else the rows named are zeroed
// and then every update added to its row. Localized (local.vocab_start): x holds rows
// [start, start + rows); updates for other rows are skipped.
Tensors scatter(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const indexing_plan::ScatterPlan plan = indexing_plan::PlanScatter(x.shape, index.shape, updates.shape, attrs);
  const bool overwrite = plan.overwrite;
  const bool sharded = plan.sharded;
  const int64_t start = plan.start;
  const int64_t rows = plan.rows;
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
  const indexing_plan::NdPlan plan = indexing_plan::PlanScatterNdAdd(x.shape, index.shape, updates.shape);
  const int64_t slice = plan.slice;
  Tensor out = x;
  for (int64_t r = 0; r < plan.rows; ++r) {
    const int64_t offset = SliceOffset(x, index, r, plan.depth);
    for (int64_t t = 0; t < slice; ++t) out.data[offset + t] += updates.data[r * slice + t];
  }
  return {out};
}

// out = x; then, in index's row-major order, value[p] lands at x's position p with p[axis]
// replaced by index[p]: assign overwrites (of ids repeated along the axis the last wins);
// the other modes gather at each position the values landing there, after x's element
// when include_self, and reduce them: their sum (add), product (mul), sum over count
// (mean), least or greatest (amin, amax; NaN if any is NaN). Every id is checked before
// anything is written.
Tensors put_along_axis(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& value = inputs[2];
  const indexing_plan::PutAlongAxisPlan plan =
      indexing_plan::PlanPutAlongAxis(x.shape, index.shape, value.shape, attrs);
  const auto axis = static_cast<size_t>(plan.axis);
  const Shape strides = internal::Strides(x.shape);
  std::vector<int64_t> targets;
  for (size_t i = 0; i < index.data.size(); ++i) {
    std::vector<int64_t> at = internal::Unravel(static_cast<int64_t>(i), index.shape);
    at[axis] = Id(index.data[i], x.shape[axis], InputField(1, "data"));
    targets.push_back(internal::Dot(at, strides));
  }
  using indexing_plan::PutReduce;
  Tensor out = x;
  if (plan.reduce == PutReduce::kAssign) {
    for (size_t i = 0; i < targets.size(); ++i) out.data[static_cast<size_t>(targets[i])] = value.data[i];
    return {out};
  }
  // Each position's operands, in order: x's element first when include_self.
  std::vector<std::vector<double>> operands(x.data.size());
  if (plan.include_self) {
    for (int64_t t : targets) operands[static_cast<size_t>(t)] = {x.data[static_cast<size_t>(t)]};
  }
  for (size_t i = 0; i < targets.size(); ++i) operands[static_cast<size_t>(targets[i])].push_back(value.data[i]);
  for (size_t t = 0; t < operands.size(); ++t) {
    const std::vector<double>& ops = operands[t];
    if (ops.empty()) continue;
    double r = 0;
    switch (plan.reduce) {
      case PutReduce::kAdd:
      case PutReduce::kMean:
        for (double o : ops) r += o;
        if (plan.reduce == PutReduce::kMean) r /= static_cast<double>(ops.size());
        break;
      case PutReduce::kMul:
        r = 1;
        for (double o : ops) r *= o;
        break;
      case PutReduce::kMin:
      case PutReduce::kMax:
        r = ops[0];
        for (double o : ops) {
          if (std::isnan(o) || std::isnan(r)) {
            r = std::numeric_limits<double>::quiet_NaN();
          } else {
            r = plan.reduce == PutReduce::kMin ? std::min(r, o) : std::max(r, o);
          }
        }
        break;
      case PutReduce::kAssign:
        break;
    }
    out.data[t] = r;
  }
  return {out};
}

// out = x; then, for each b of the indices' broadcast shape B in row-major order, the slice
// x[i0[b], ..., i{k-1}[b]] gets value[b] (broadcast): assigned (of writes to one position
// the last wins) or added (accumulate). Ids in [-n, n), negative ones counting from the end;
// every id is checked before anything is written.
Tensors index_put(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 3);
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape);
    dtypes.push_back(t.dtype);
  }
  const indexing_plan::IndexPutPlan plan = indexing_plan::PlanIndexPut(shapes, attrs, &dtypes);
  const Tensor& x = inputs[0];
  const Tensor& value = inputs.back();
  const auto k = static_cast<size_t>(plan.k);
  const Shape x_strides = internal::Strides(x.shape);
  int64_t count = 1;
  for (int64_t b : plan.broadcast) count *= b;
  std::vector<int64_t> offsets;  // per b, x's offset of the slice it writes
  for (int64_t flat = 0; flat < count; ++flat) {
    const std::vector<int64_t> b = internal::Unravel(flat, plan.broadcast);
    int64_t offset = 0;
    for (size_t j = 0; j < k; ++j) {
      const Tensor& index = inputs[j + 1];
      const double v = index.data[static_cast<size_t>(internal::BroadcastOffset(b, index.shape))];
      const int64_t n = x.shape[j];
      if (!std::isfinite(v) || v != std::trunc(v)) {
        ThrowInvalid(InputField(j + 1, "data"), "id " + std::to_string(v) + " is not an integer");
      }
      if (v < static_cast<double>(-n) || v >= static_cast<double>(n)) {
        ThrowInvalid(InputField(j + 1, "data"), "id " + std::to_string(v) + " outside [" + std::to_string(-n) +
                                                    ", " + std::to_string(n) + ")");
      }
      const auto id = static_cast<int64_t>(v);
      offset += (id < 0 ? id + n : id) * x_strides[j];
    }
    offsets.push_back(offset);
  }
  Shape trailing(x.shape.begin() + plan.k, x.shape.end());
  int64_t slice = 1;
  for (int64_t t : trailing) slice *= t;
  Tensor out = x;
  for (int64_t flat = 0; flat < count; ++flat) {
    std::vector<int64_t> at = internal::Unravel(flat, plan.broadcast);
    for (int64_t t = 0; t < slice; ++t) {
      std::vector<int64_t> w = at;
      const std::vector<int64_t> tail = internal::Unravel(t, trailing);
      w.insert(w.end(), tail.begin(), tail.end());
      const double u = value.data[static_cast<size_t>(internal::BroadcastOffset(w, value.shape))];
      double& dst = out.data[static_cast<size_t>(offsets[static_cast<size_t>(flat)] + t)];
      dst = plan.accumulate ? dst + u : u;
    }
  }
  return {out};
}

}  // namespace spmd::reference::ops
