// Indexing ops (docs/OPS.md "Paddle's other registered ops"): one_hot, roll,
// index_select, gather, take_along_axis, moe_combine, moe_gate_dispatch. Plain loops over multi-indices: each output element is computed
// from the definition, never by copying rows.
#include <cmath>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/engine/op_plan.h"
#include "rules/ops/indexing_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;
using internal::InputField;

// Returns `v` as an integral id, or throws naming `field`.
int64_t IdValue(double v, const std::string& field) {
  if (!std::isfinite(v) || v != std::trunc(v)) {
    ThrowInvalid(field, "id " + std::to_string(v) + " is not an integer");
  }
  if (std::fabs(v) > 9.0e15) ThrowInvalid(field, "id " + std::to_string(v) + " is out of range");
  return static_cast<int64_t>(v);
}

// ((v % n) + n) % n: the cyclic position of v in [0, n) (n > 0).
int64_t Mod(int64_t v, int64_t n) {
  const int64_t r = v % n;
  return r < 0 ? r + n : r;
}

// index_select / gather with a 0-d (drop_dim) or 1-D index. Localized: x holds the rows
// [start, start + x.shape[axis]) of the global x along axis; other ids read zeros.
Tensors Select(const Tensors& inputs, const Attrs& attrs, bool allow_0d) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::SelectPlan plan = indexing_plan::PlanSelect(x.shape, index.shape, attrs, allow_0d);
  const int64_t axis = plan.axis;
  const bool drop_dim = plan.drop_dim;
  const bool sharded = plan.sharded;
  const int64_t start = plan.start;
  const int64_t rows = x.shape[axis];
  std::vector<int64_t> ids;
  for (double v : index.data) {
    const int64_t id = IdValue(v, InputField(1, "data"));
    if (id < 0 || (!sharded && id >= rows)) {
      ThrowInvalid(InputField(1, "data"),
                   "id " + std::to_string(id) + " outside [0, " + std::to_string(rows) + ")");
    }
    ids.push_back(id);
  }
  const Shape& out_shape = plan.out;
  Tensor out = internal::Zeros(out_shape, x.dtype);
  const Shape x_strides = internal::Strides(x.shape);
  for (int64_t i = 0; i < NumElements(out_shape); ++i) {
    std::vector<int64_t> at = internal::Unravel(i, out_shape);
    const int64_t k = drop_dim ? 0 : at[axis];
    if (drop_dim) at.insert(at.begin() + axis, 0);
    const int64_t row = ids[k] - start;
    if (row < 0 || row >= rows) continue;  // another shard's row: stays zero
    at[axis] = row;
    out.data[i] = x.data[internal::Dot(at, x_strides)];
  }
  return {out};
}

}  // namespace

// out[..., c] = 1.0 if x[...] == c else 0.0; float32 (Paddle's one_hot output dtype).
Tensors one_hot(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const indexing_plan::OneHotPlan plan = indexing_plan::PlanOneHot(x.shape, attrs);
  const int64_t classes = plan.classes;
  Tensor out = internal::Zeros(plan.out, DType::kFloat32);
  for (size_t t = 0; t < x.data.size(); ++t) {
    const int64_t id = IdValue(x.data[t], InputField(0, "data"));
    if (id < 0 || id >= classes) {
      ThrowInvalid(InputField(0, "data"),
                   "id " + std::to_string(id) + " outside [0, " + std::to_string(classes) + ")");
    }
    for (int64_t c = 0; c < classes; ++c) {
      out.data[t * static_cast<size_t>(classes) + static_cast<size_t>(c)] = c == id ? 1.0 : 0.0;
    }
  }
  return {out};
}

// out[i] = x[i - shift] cyclically along each listed axis (the shifts of a repeated axis
// add up); with no axis, along the flattened x.
Tensors roll(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const indexing_plan::RollPlan plan = indexing_plan::PlanRoll(x.shape, attrs);
  const std::vector<int64_t>& shifts = attrs.GetInts("shifts");
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t numel = NumElements(x.shape);
  Tensor out = x;
  if (plan.flat) {
    if (numel == 0) return {out};
    const int64_t s = Mod(shifts[0], numel);
    for (int64_t i = 0; i < numel; ++i) out.data[i] = x.data[Mod(i - s, numel)];
    return {out};
  }
  std::vector<int64_t> total(static_cast<size_t>(rank), 0);  // per dim, mod its size
  for (size_t k = 0; k < plan.axes.size(); ++k) {
    const int64_t d = plan.axes[k];
    if (x.shape[d] == 0) continue;
    total[d] = Mod(total[d] + Mod(shifts[k], x.shape[d]), x.shape[d]);
  }
  const Shape strides = internal::Strides(x.shape);
  for (int64_t i = 0; i < numel; ++i) {
    std::vector<int64_t> at = internal::Unravel(i, x.shape);
    for (int64_t d = 0; d < rank; ++d) at[d] = Mod(at[d] - total[d], x.shape[d]);
    out.data[i] = x.data[internal::Dot(at, strides)];
  }
  return {out};
}

// out[i] = x[i - before] where every coordinate falls inside x, else pad_value.
Tensors pad(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const std::vector<int64_t>& paddings = attrs.GetInts("paddings");
  const double value = attrs.GetFloat("pad_value");
  const size_t rank = x.shape.size();
  const Shape out_shape = indexing_plan::PlanPad(x.shape, attrs, &x.dtype);
  // The fill value as x's dtype holds it (as Paddle converts pad_value).
  // A value beyond float's range is float's infinity of its sign; an int64 x needs a
  // whole value in range.
  double fill = value;
  if (x.dtype == DType::kFloat32) {
    fill = std::fabs(value) > 3.4028235677973366e38 ? std::copysign(INFINITY, value)
                                                    : static_cast<double>(static_cast<float>(value));
  }
  if (x.dtype == DType::kInt64) fill = std::trunc(value);
  if (x.dtype == DType::kBool) fill = value != 0.0 ? 1.0 : 0.0;
  Tensor out = internal::Zeros(out_shape, x.dtype);
  const Shape strides = internal::Strides(x.shape);
  for (int64_t i = 0; i < NumElements(out_shape); ++i) {
    std::vector<int64_t> at = internal::Unravel(i, out_shape);
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      at[d] -= paddings[2 * d];
      inside = inside && at[d] >= 0 && at[d] < x.shape[d];
    }
    out.data[i] = inside ? x.data[internal::Dot(at, strides)] : fill;
  }
  return {out};
}

// silu(x) * y with silu(x) = x / (1 + e^-x).
Tensors swiglu(const Tensors& inputs, const Attrs&) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  shape_plan::CheckSameShape(x.shape, y.shape);
  Tensor out = internal::Zeros(x.shape);
  for (size_t k = 0; k < x.data.size(); ++k) {
    out.data[k] = x.data[k] / (1.0 + std::exp(-x.data[k])) * y.data[k];
  }
  return {out};
}

Tensors index_select(const Tensors& inputs, const Attrs& attrs) {
  return Select(inputs, attrs, false);
}

Tensors take_along_axis(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::TakeAlongAxisPlan plan = indexing_plan::PlanTakeAlongAxis(x.shape, index.shape, attrs);
  const size_t axis = static_cast<size_t>(plan.axis);
  const int64_t rows = x.shape[axis];
  Tensor out = internal::Zeros(plan.out, x.dtype);
  const Shape x_strides = internal::Strides(x.shape);
  for (int64_t i = 0; i < NumElements(plan.out); ++i) {
    const int64_t id = IdValue(index.data[i], InputField(1, "data"));
    if (id < 0 || id >= rows) spmd::plan::ThrowIdOutside(InputField(1, "data"), "id", id, rows);
    std::vector<int64_t> at = internal::Unravel(i, plan.out);
    at[axis] = id;
    out.data[i] = x.data[internal::Dot(at, x_strides)];
  }
  return {out};
}

Tensors gather(const Tensors& inputs, const Attrs& attrs) { return Select(inputs, attrs, true); }

// y[t, h] = sum over j of combine_weights[t, j] * x[scatter_index[t, j], h], every id
// checked in [0, rows) first.
Tensors moe_combine(const Tensors& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& weights = inputs[1];
  const Tensor& index = inputs[2];
  const indexing_plan::MoeCombinePlan plan = indexing_plan::PlanMoeCombine(x.shape, weights.shape, index.shape);
  std::vector<int64_t> ids;
  for (double v : index.data) {
    const int64_t id = IdValue(v, InputField(2, "data"));
    if (id < 0 || id >= plan.rows) spmd::plan::ThrowIdOutside(InputField(2, "data"), "id", id, plan.rows);
    ids.push_back(id);
  }
  Tensor y = internal::Zeros(plan.out, x.dtype);
  for (int64_t t = 0; t < plan.tokens; ++t) {
    for (int64_t h = 0; h < plan.hidden; ++h) {
      double sum = 0;
      for (int64_t j = 0; j < plan.k; ++j) {
        const size_t at = static_cast<size_t>(t * plan.k + j);
        sum += weights.data[at] * x.data[static_cast<size_t>(ids[at] * plan.hidden + h)];
      }
      y.data[static_cast<size_t>(t * plan.hidden + h)] = sum;
    }
  }
  return {y};
}

// Paddle's MoE dispatch, from its definition (docs/OPS.md). Each token's k experts: k times
// the best expert not yet taken by score gate_logits + corr_bias, a NaN score above every
// number, equal scores to the lower expert. Then the routes queue: choice j = 0 of every
// token in token order, then j = 1, ...; a route whose expert already holds `capacity`
// tokens is dropped (scatter_index 0, combine_weight 0), a kept one copies x's row into the
// expert's next slot. expert_offset counts every route, dropped ones too, cumulatively.
Tensors moe_gate_dispatch(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& gate = inputs[1];
  const std::vector<double>& bias = inputs[2].data;  // read only when given
  const indexing_plan::MoeGateDispatchPlan plan =
      indexing_plan::PlanMoeGateDispatch(x.shape, gate.shape, inputs[2].shape, attrs);
  const int64_t S = plan.tokens, H = plan.hidden, E = plan.experts, K = plan.k, C = plan.capacity;
  Tensor y = internal::Zeros(plan.outs[0], x.dtype);
  Tensor weights = internal::Zeros(plan.outs[1], IsFloating(gate.dtype) ? gate.dtype : DType::kFloat64);
  Tensor slots = internal::Zeros(plan.outs[2], DType::kInt64);
  Tensor offsets = internal::Zeros(plan.outs[3], DType::kInt64);
  Tensor experts = internal::Zeros(plan.outs[4], DType::kInt64);
  auto score = [&](int64_t s, int64_t e) {
    return gate.data[static_cast<size_t>(s * E + e)] + (plan.has_bias ? bias[static_cast<size_t>(e)] : 0.0);
  };
  auto better = [](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
    return a > b;
  };
  for (int64_t s = 0; s < S; ++s) {
    std::vector<bool> taken(static_cast<size_t>(E), false);
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (!taken[static_cast<size_t>(e)] && (best < 0 || better(score(s, e), score(s, best)))) best = e;
      }
      taken[static_cast<size_t>(best)] = true;
      experts.data[static_cast<size_t>(s * K + j)] = static_cast<double>(best);
    }
  }
  std::vector<int64_t> queued(static_cast<size_t>(E), 0);
  for (int64_t j = 0; j < K; ++j) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t e = static_cast<int64_t>(experts.data[static_cast<size_t>(s * K + j)]);
      const int64_t position = queued[static_cast<size_t>(e)]++;
      if (position >= C) continue;  // dropped: scatter_index and combine_weight stay 0
      slots.data[static_cast<size_t>(j * S + s)] = static_cast<double>(e * C + position);
      weights.data[static_cast<size_t>(s * K + j)] = gate.data[static_cast<size_t>(s * E + e)];
      for (int64_t h = 0; h < H; ++h) {
        y.data[static_cast<size_t>((e * C + position) * H + h)] = x.data[static_cast<size_t>(s * H + h)];
      }
    }
  }
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) {
    total += queued[static_cast<size_t>(e)];
    offsets.data[static_cast<size_t>(e)] = static_cast<double>(total);
  }
  return {y, weights, slots, offsets, experts};
}

}  // namespace spmd::reference::ops
