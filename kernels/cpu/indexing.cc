// Indexing ops (docs/OPS.md "Paddle's other registered ops"): one_hot, roll,
// index_select, gather. roll, index_select and gather only move values: they work on
// bytes, take any dtype and keep x's; copies are whole inner blocks (memcpy). one_hot
// writes float32, as Paddle's; moe_combine computes in its floating inputs' dtype;
// moe_gate_dispatch copies x's rows as bytes (any dtype) and gate_logits' values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/along_axis.h"
#include "kernels/cpu/internal.h"
#include "rules/engine/op_plan.h"
#include "rules/ops/indexing_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::InputField;
using internal::NewOutput;

// v mod n in [0, n), n > 0.
int64_t Mod(int64_t v, int64_t n) {
  const int64_t r = v % n;
  return r < 0 ? r + n : r;
}

// Rotates x by `shift` (in [0, len)) along the middle dim of the view: per outer block,
// out[shift:] = x[:len - shift], out[:shift] = x[len - shift:], each one memcpy.
void RotateInto(const std::byte* x, std::byte* out, const AxisView& v, int64_t shift, size_t es) {
  const size_t row = static_cast<size_t>(v.inner) * es;
  const size_t block = static_cast<size_t>(v.len) * row;
  const size_t head = static_cast<size_t>(shift) * row;  // bytes that wrap around
  for (int64_t o = 0; o < v.outer; ++o) {
    const std::byte* src = x + static_cast<size_t>(o) * block;
    std::byte* dst = out + static_cast<size_t>(o) * block;
    std::memcpy(dst + head, src, block - head);
    std::memcpy(dst, src + (block - head), head);
  }
}

// index_select / gather: x viewed as [outer, rows, inner]; out as [outer, K, inner] with
// K the ids (one id and no K dim for a 0-d index). Localized (local.vocab_start): x holds
// rows [start, start + rows) of the global x along axis; other ids give zero blocks.
Tensors Select(const TensorArgs& inputs, const Attrs& attrs, bool allow_0d) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::SelectPlan plan = indexing_plan::PlanSelect(x.shape(), index.shape(), attrs, allow_0d);
  const bool sharded = plan.sharded;
  const int64_t start = plan.start;
  const AxisView v = internal::ViewAlong(x.shape(), plan.axis);
  const std::string field = InputField(1, "data");
  const std::vector<int64_t> ids = internal::ReadIds(index, field);
  for (int64_t id : ids) {
    if (id < 0 || (!sharded && id >= v.len)) {
      ThrowInvalid(field, "id " + std::to_string(id) + " outside [0, " + std::to_string(v.len) + ")");
    }
  }
  Tensor out = NewOutput(plan.out, x.dtype());
  const size_t row = static_cast<size_t>(v.inner) * x.element_size();
  const int64_t k_count = static_cast<int64_t>(ids.size());
  if (row == 0 || out.numel() == 0) return {std::move(out)};
  const std::byte* src = x.bytes();
  std::byte* dst = out.bytes();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t k = 0; k < k_count; ++k, dst += row) {
      const int64_t r = ids[k] - start;  // no overflow: 0 <= id, 0 <= start
      if (r < 0 || r >= v.len) {
        std::memset(dst, 0, row);  // another shard's row
      } else {
        std::memcpy(dst, src + (static_cast<size_t>(o * v.len + r)) * row, row);
      }
    }
  }
  return {std::move(out)};
}

}  // namespace

Tensors one_hot(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const indexing_plan::OneHotPlan plan = indexing_plan::PlanOneHot(inputs[0].shape(), attrs);
  const int64_t classes = plan.classes;
  const std::string field = InputField(0, "data");
  const std::vector<int64_t> ids = internal::ReadIds(inputs[0], field);
  Tensor out = NewOutput(plan.out, DType::kFloat32, /*zero=*/true);
  float* o = out.data<float>();
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= classes) {
      ThrowInvalid(field, "id " + std::to_string(ids[t]) + " outside [0, " +
                              std::to_string(classes) + ")");
    }
    o[static_cast<int64_t>(t) * classes + ids[t]] = 1.0f;
  }
  return {std::move(out)};
}

Tensors roll(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const indexing_plan::RollPlan plan = indexing_plan::PlanRoll(x.shape(), attrs);
  const std::vector<int64_t>& shifts = attrs.GetInts("shifts");
  const size_t es = x.element_size();
  if (plan.flat) {
    Tensor out = NewOutput(x.shape(), x.dtype());
    if (x.numel() == 0) return {std::move(out)};
    const AxisView flat{1, x.numel(), 1};
    RotateInto(x.bytes(), out.bytes(), flat, Mod(shifts[0], x.numel()), es);
    return {std::move(out)};
  }
  std::vector<int64_t> total(static_cast<size_t>(x.rank()), 0);
  for (size_t k = 0; k < plan.axes.size(); ++k) {
    const int64_t d = plan.axes[k];
    const int64_t n = x.shape()[d];
    if (n > 0) total[d] = Mod(total[d] + Mod(shifts[k], n), n);
  }
  Tensor out = x;
  if (x.numel() == 0) return {std::move(out)};
  Tensor scratch = NewOutput(x.shape(), x.dtype());
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (total[d] == 0) continue;
    RotateInto(out.bytes(), scratch.bytes(), internal::ViewAlong(x.shape(), d), total[d], es);
    std::swap(out, scratch);
  }
  return {std::move(out)};
}

// pad: the output filled with pad_value (in x's dtype), then x's rows copied in, one
// memcpy per innermost row.
Tensors pad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const std::vector<int64_t>& paddings = attrs.GetInts("paddings");
  const double value = attrs.GetFloat("pad_value");
  const int64_t rank = x.rank();
  const DType dtype = x.dtype();
  const Shape out_shape = indexing_plan::PlanPad(x.shape(), attrs, &dtype);
  Tensor out = NewOutput(out_shape, x.dtype());
  const int64_t n = out.numel();
  // The fill value in x's dtype (pad_value converted, as Paddle); beyond float's range,
  // float's infinity of its sign.
  const float fill32 = std::fabs(value) > 3.4028235677973366e38
                           ? std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(value > 0 ? 1 : -1))
                           : static_cast<float>(value);
  switch (x.dtype()) {
    case DType::kFloat32: std::fill(out.data<float>(), out.data<float>() + n, fill32); break;
    case DType::kInt64: std::fill(out.data<int64_t>(), out.data<int64_t>() + n, static_cast<int64_t>(value)); break;
    case DType::kBool: std::fill(out.data<bool>(), out.data<bool>() + n, value != 0.0); break;
    default: std::fill(out.data<double>(), out.data<double>() + n, value); break;
  }
  if (x.numel() == 0) return {std::move(out)};
  const size_t es = x.element_size();
  if (rank == 0) {
    std::memcpy(out.bytes(), x.bytes(), es);
    return {std::move(out)};
  }
  // Walk x's rows (all dims but the last) with an odometer; each row lands at its padded
  // offset in out.
  const int64_t inner = x.shape()[rank - 1];
  const int64_t rows = x.numel() / inner;
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);
  Shape out_strides(static_cast<size_t>(rank), 1);
  for (int64_t d = rank - 2; d >= 0; --d) out_strides[d] = out_strides[d + 1] * out_shape[d + 1];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = paddings[2 * (rank - 1)];
    for (int64_t d = 0; d < rank - 1; ++d) offset += (at[d] + paddings[2 * d]) * out_strides[d];
    std::memcpy(out.bytes() + static_cast<size_t>(offset) * es,
                x.bytes() + static_cast<size_t>(r * inner) * es, static_cast<size_t>(inner) * es);
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++at[d] < x.shape()[d]) break;
      at[d] = 0;
    }
  }
  return {std::move(out)};
}

Tensors swiglu(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 2);
  shape_plan::CheckSameShape(inputs[0].shape(), inputs[1].shape());
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(inputs[0]);
    internal::ValuesAs<T> yv(inputs[1]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      const T v = xv[i];
      o[i] = v * yv[i] / (T(1) + std::exp(-v));
    }
    return Tensors{std::move(out)};
  });
}

Tensors index_select(const TensorArgs& inputs, const Attrs& attrs) {
  return Select(inputs, attrs, false);
}

Tensors gather(const TensorArgs& inputs, const Attrs& attrs) { return Select(inputs, attrs, true); }

// Every id is checked before anything is copied; then out's elements in order, each from its
// offset in x (AlongAxisOffsets).
Tensors take_along_axis(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::TakeAlongAxisPlan plan =
      indexing_plan::PlanTakeAlongAxis(x.shape(), index.shape(), attrs);
  const auto axis = static_cast<size_t>(plan.axis);
  const int64_t rows = x.shape()[axis];
  const std::string field = InputField(1, "data");
  const std::vector<int64_t> ids = internal::ReadIds(index, field);
  for (int64_t id : ids) {
    if (id < 0 || id >= rows) spmd::plan::ThrowIdOutside(field, "id", id, rows);
  }
  Tensor out = NewOutput(plan.out, x.dtype());
  const size_t es = x.element_size();
  std::byte* dst = out.bytes();
  for (int64_t offset : AlongAxisOffsets(x.shape(), index.shape(), axis, ids)) {
    std::memcpy(dst, x.bytes() + static_cast<size_t>(offset) * es, es);
    dst += es;
  }
  return {std::move(out)};
}

// Every id is checked before anything is computed; then each token's row accumulates its k
// weighted rows of x in the floating inputs' dtype.
Tensors moe_combine(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& weights = inputs[1];
  const Tensor& index = inputs[2];
  const indexing_plan::MoeCombinePlan plan =
      indexing_plan::PlanMoeCombine(x.shape(), weights.shape(), index.shape());
  const std::string field = InputField(2, "data");
  const std::vector<int64_t> ids = internal::ReadIds(index, field);
  for (int64_t id : ids) {
    if (id < 0 || id >= plan.rows) spmd::plan::ThrowIdOutside(field, "id", id, plan.rows);
  }
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(x);
    internal::ValuesAs<T> wv(weights);
    Tensor y = NewOutput(plan.out, DTypeOf<T>::value);
    T* out = y.data<T>();
    std::fill(out, out + y.numel(), T(0));
    for (int64_t t = 0; t < plan.tokens; ++t) {
      T* row = out + t * plan.hidden;
      for (int64_t j = 0; j < plan.k; ++j) {
        const T w = wv.data()[t * plan.k + j];
        const T* src = xv.data() + ids[static_cast<size_t>(t * plan.k + j)] * plan.hidden;
        for (int64_t h = 0; h < plan.hidden; ++h) row[h] += w * src[h];
      }
    }
    return Tensors{std::move(y)};
  });
}

// Each token's experts by a partial sort of its scores (gate_logits + corr_bias, as
// doubles) under the total order of the sort kernels (greater first, NaN first, then the
// lower expert); then one pass over the routes, choice-major, gives each its place in its
// expert's queue: the first `capacity` copy x's row (bytes) into their slot.
Tensors moe_gate_dispatch(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& gate = inputs[1];
  const indexing_plan::MoeGateDispatchPlan plan =
      indexing_plan::PlanMoeGateDispatch(x.shape(), gate.shape(), inputs[2].shape(), attrs);
  const int64_t tokens = plan.tokens, experts = plan.experts, k = plan.k, capacity = plan.capacity;
  Tensor y = NewOutput(plan.outs[0], x.dtype(), /*zero=*/true);
  const DType weight_dtype = IsFloating(gate.dtype()) ? gate.dtype() : DType::kFloat64;
  Tensor weights = NewOutput(plan.outs[1], weight_dtype, /*zero=*/true);
  Tensor scatter = NewOutput(plan.outs[2], DType::kInt64, /*zero=*/true);
  Tensor offset = NewOutput(plan.outs[3], DType::kInt64);
  Tensor expert_id = NewOutput(plan.outs[4], DType::kInt64);
  int64_t* ids = expert_id.data<int64_t>();
  {
    internal::ValuesAs<double> g(gate);
    std::vector<double> b(static_cast<size_t>(experts), 0.0);
    if (plan.has_bias) {
      internal::ValuesAs<double> bv(inputs[2]);
      std::copy(bv.data(), bv.data() + experts, b.begin());
    }
    std::vector<double> score(static_cast<size_t>(experts));
    std::vector<int64_t> order(static_cast<size_t>(experts));
    const auto first = [&](int64_t a, int64_t c) {
      const bool a_nan = std::isnan(score[a]), c_nan = std::isnan(score[c]);
      if (a_nan != c_nan) return a_nan;
      if (!a_nan && score[a] != score[c]) return score[a] > score[c];
      return a < c;
    };
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < experts; ++e) score[e] = g[t * experts + e] + b[e];
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(), first);
      std::copy(order.begin(), order.begin() + k, ids + t * k);
    }
  }
  std::vector<int64_t> filled(static_cast<size_t>(experts), 0);
  const size_t row = static_cast<size_t>(plan.hidden) * x.element_size();
  const std::byte* src = static_cast<const std::byte*>(x.bytes());
  std::byte* dst = static_cast<std::byte*>(y.bytes());
  int64_t* slot = scatter.data<int64_t>();
  std::vector<bool> kept(static_cast<size_t>(tokens * k), false);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t e = ids[t * k + j];
      const int64_t place = filled[e]++;
      if (place >= capacity) continue;
      kept[static_cast<size_t>(t * k + j)] = true;
      slot[j * tokens + t] = e * capacity + place;
      if (row > 0) std::memcpy(dst + static_cast<size_t>(e * capacity + place) * row, src + static_cast<size_t>(t) * row, row);
    }
  }
  std::partial_sum(filled.begin(), filled.end(), offset.data<int64_t>());
  internal::DispatchFloat(weight_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> g(gate);
    T* w = weights.data<T>();
    for (int64_t r = 0; r < tokens * k; ++r) {
      if (kept[static_cast<size_t>(r)]) w[r] = g[(r / k) * experts + ids[r]];
    }
  });
  return {std::move(y), std::move(weights), std::move(scatter), std::move(offset), std::move(expert_id)};
}

}  // namespace spmd::kernels::cpu
