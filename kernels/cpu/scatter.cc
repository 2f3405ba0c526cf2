// Index-driven reads and writes (docs/OPS.md "Paddle's other registered ops"): gather_nd
// moves bytes (any dtype, x's kept; one memcpy per addressed slice); scatter,
// scatter_nd_add, put_along_axis and index_put compute in float32 or float64 (the floating
// inputs' dtype).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/along_axis.h"
#include "kernels/cpu/internal.h"
#include "rules/ops/indexing_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::CheckArity;
using internal::InputField;
using internal::NewOutput;

// The ids of `t` as int64, each whole and in [0, bound) (bound < 0: no upper bound);
// errors name `field`, as the references'.
std::vector<int64_t> Ids(const Tensor& t, const std::string& field, int64_t bound = -1) {
  const int64_t n = t.numel();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  internal::VisitData(t, [&](const auto* src) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(src[i]);
      if constexpr (std::is_floating_point_v<V>) {
        if (!std::isfinite(v) || v != std::trunc(v)) {
          ThrowInvalid(field, "id " + std::to_string(v) + " is not an integer");
        }
      }
      if (v < 0 || (bound >= 0 && v >= static_cast<double>(bound))) {
        ThrowInvalid(field, "id " + std::to_string(v) + " outside [0, " + std::to_string(bound) + ")");
      }
      ids[static_cast<size_t>(i)] = static_cast<int64_t>(src[i]);
    }
  });
  return ids;
}

// Per index row, the element offset in x of the slice it addresses (ids checked per dim).
std::vector<int64_t> SliceOffsets(const Tensor& x, const Tensor& index, const indexing_plan::NdPlan& plan) {
  const std::vector<int64_t> ids = Ids(index, InputField(1, "data"));
  const int64_t depth = plan.depth;
  std::vector<int64_t> offsets(static_cast<size_t>(plan.rows), 0);
  Shape strides(static_cast<size_t>(x.rank()), 1);
  for (int64_t d = x.rank() - 2; d >= 0; --d) strides[d] = strides[d + 1] * x.shape()[d + 1];
  for (size_t r = 0; r < offsets.size() && depth > 0; ++r) {
    for (int64_t j = 0; j < depth; ++j) {
      const int64_t id = ids[r * static_cast<size_t>(depth) + static_cast<size_t>(j)];
      if (id >= x.shape()[j]) {
        ThrowInvalid(InputField(1, "data"), "id " + std::to_string(id) + " outside [0, " +
                                                std::to_string(x.shape()[j]) + ")");
      }
      offsets[r] += id * strides[j];
    }
  }
  return offsets;
}

}  // namespace

Tensors gather_nd(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::NdPlan plan = indexing_plan::PlanGatherNd(x.shape(), index.shape());
  const std::vector<int64_t> offsets = SliceOffsets(x, index, plan);
  Tensor out = NewOutput(plan.gathered, x.dtype());
  const size_t es = x.element_size();
  const size_t slice = static_cast<size_t>(plan.slice) * es;
  if (slice == 0) return {std::move(out)};
  for (size_t r = 0; r < offsets.size(); ++r) {
    std::memcpy(out.bytes() + r * slice, x.bytes() + static_cast<size_t>(offsets[r]) * es, slice);
  }
  return {std::move(out)};
}

Tensors scatter(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const indexing_plan::ScatterPlan plan =
      indexing_plan::PlanScatter(inputs[0].shape(), inputs[1].shape(), inputs[2].shape(), attrs);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const bool overwrite = plan.overwrite;
  const int64_t start = plan.start;
  const int64_t rows = plan.rows;
  const std::vector<int64_t> ids = Ids(index, InputField(1, "data"), plan.sharded ? -1 : rows);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(x);
    internal::ValuesAs<T> uv(updates);
    Tensor out = NewOutput(x.shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const int64_t n = out.numel();
    const int64_t row = rows == 0 ? 0 : n / rows;
    std::copy(xv.data(), xv.data() + n, o);
    const auto held = [&](int64_t id) { return id >= start && id - start < rows; };
    if (!overwrite) {
      for (int64_t id : ids) {
        if (held(id)) std::fill(o + (id - start) * row, o + (id - start + 1) * row, T(0));
      }
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!held(ids[i])) continue;  // another shard's row
      T* dst = o + (ids[i] - start) * row;
      const T* src = uv.data() + static_cast<int64_t>(i) * row;
      for (int64_t t = 0; t < row; ++t) dst[t] = overwrite ? src[t] : dst[t] + src[t];
    }
    return Tensors{std::move(out)};
  });
}

Tensors scatter_nd_add(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const indexing_plan::NdPlan plan = indexing_plan::PlanScatterNdAdd(x.shape(), index.shape(), updates.shape());
  const std::vector<int64_t> offsets = SliceOffsets(x, index, plan);
  const int64_t slice = plan.slice;
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(x);
    internal::ValuesAs<T> uv(updates);
    Tensor out = NewOutput(x.shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    std::copy(xv.data(), xv.data() + out.numel(), o);
    for (size_t r = 0; r < offsets.size(); ++r) {
      const T* src = uv.data() + static_cast<int64_t>(r) * slice;
      T* dst = o + offsets[r];
      for (int64_t t = 0; t < slice; ++t) dst[t] += src[t];
    }
    return Tensors{std::move(out)};
  });
}

// Every id is checked first; then the writes in order, each at its offset in x
// (AlongAxisOffsets). The reducing modes start each position some value lands on from x's
// element (include_self) or from the mode's identity (mean's count from 1 or 0), fold the
// values in, in order, and mean divides by the count at the end.
Tensors put_along_axis(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& value = inputs[2];
  const indexing_plan::PutAlongAxisPlan plan =
      indexing_plan::PlanPutAlongAxis(x.shape(), index.shape(), value.shape(), attrs);
  const auto axis = static_cast<size_t>(plan.axis);
  const std::vector<int64_t> ids = Ids(index, InputField(1, "data"), x.shape()[axis]);
  const std::vector<int64_t> targets = AlongAxisOffsets(x.shape(), index.shape(), axis, ids);
  using indexing_plan::PutReduce;
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(x);
    internal::ValuesAs<T> vv(value);
    Tensor out = NewOutput(x.shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    std::copy(xv.data(), xv.data() + out.numel(), o);
    const T* v = vv.data();
    if (plan.reduce == PutReduce::kAssign) {
      for (size_t i = 0; i < targets.size(); ++i) o[targets[i]] = v[i];
      return Tensors{std::move(out)};
    }
    std::vector<int64_t> count;  // mean's operands per position
    if (plan.reduce == PutReduce::kMean) count.assign(static_cast<size_t>(out.numel()), 0);
    if (!plan.include_self) {
      const T identity = plan.reduce == PutReduce::kMul   ? T(1)
                         : plan.reduce == PutReduce::kMin ? std::numeric_limits<T>::infinity()
                         : plan.reduce == PutReduce::kMax ? -std::numeric_limits<T>::infinity()
                                                          : T(0);
      for (int64_t t : targets) o[t] = identity;
    } else if (!count.empty()) {
      for (int64_t t : targets) count[static_cast<size_t>(t)] = 1;
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      T& dst = o[targets[i]];
      switch (plan.reduce) {
        case PutReduce::kAdd: dst += v[i]; break;
        case PutReduce::kMean:
          dst += v[i];
          ++count[static_cast<size_t>(targets[i])];
          break;
        case PutReduce::kMul: dst *= v[i]; break;
        case PutReduce::kMin:
        case PutReduce::kMax:
          if (std::isnan(dst) || std::isnan(v[i])) {
            dst = std::numeric_limits<T>::quiet_NaN();
          } else {
            dst = plan.reduce == PutReduce::kMin ? std::min(dst, v[i]) : std::max(dst, v[i]);
          }
          break;
        case PutReduce::kAssign: break;
      }
    }
    for (size_t t = 0; t < count.size(); ++t) {
      if (count[t] > 0) o[t] /= static_cast<T>(count[t]);
    }
    return Tensors{std::move(out)};
  });
}

// Every id is read and checked first (negative ones wrapped), giving per element b of the
// broadcast shape B x's offset of the slice it writes (an odometer over B with each index's
// broadcast strides); then the writes in B's row-major order, value read with its broadcast
// strides.
Tensors index_put(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 3);
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  const indexing_plan::IndexPutPlan plan = indexing_plan::PlanIndexPut(shapes, attrs, &dtypes);
  const Tensor& x = inputs[0];
  const Tensor& value = inputs[inputs.size() - 1];
  const auto k = static_cast<size_t>(plan.k);
  const size_t rank = x.shape().size();
  Shape x_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) x_strides[d - 1] = x_strides[d] * x.shape()[d];
  // `shape`'s strides seen from `out` (right-aligned; 0 where it broadcasts).
  const auto broadcast_strides = [](const Shape& shape, const Shape& out) {
    Shape strides(out.size(), 0);
    int64_t stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const size_t at = out.size() - shape.size() + d;
      strides[at] = shape[d] == 1 ? 0 : stride;
      stride *= shape[d];
    }
    return strides;
  };
  const Shape& bshape = plan.broadcast;
  int64_t count = 1;
  for (int64_t b : bshape) count *= b;
  std::vector<int64_t> offsets(static_cast<size_t>(count), 0);
  for (size_t j = 0; j < k; ++j) {
    const std::string field = InputField(j + 1, "data");
    const std::vector<int64_t> ids = internal::ReadIds(inputs[j + 1], field);
    const int64_t n = x.shape()[j];
    const Shape strides = broadcast_strides(inputs[j + 1].shape(), bshape);
    std::vector<int64_t> at(bshape.size(), 0);
    int64_t src = 0;
    for (int64_t b = 0; b < count; ++b) {
      int64_t id = ids[static_cast<size_t>(src)];
      if (id < -n || id >= n) {
        ThrowInvalid(field, "id " + std::to_string(id) + " outside [" + std::to_string(-n) + ", " +
                                std::to_string(n) + ")");
      }
      if (id < 0) id += n;
      offsets[static_cast<size_t>(b)] += id * x_strides[j];
      for (size_t d = bshape.size(); d-- > 0;) {
        src += strides[d];
        if (++at[d] < bshape[d]) break;
        src -= at[d] * strides[d];
        at[d] = 0;
      }
    }
  }
  int64_t slice = 1;
  for (size_t d = k; d < rank; ++d) slice *= x.shape()[d];
  const Shape value_strides = broadcast_strides(value.shape(), plan.written);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, inputs.size() - 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(x);
    internal::ValuesAs<T> vv(value);
    Tensor out = NewOutput(x.shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    std::copy(xv.data(), xv.data() + out.numel(), o);
    const T* v = vv.data();
    std::vector<int64_t> at(plan.written.size(), 0);
    int64_t src = 0;  // value's offset of `at`
    for (int64_t b = 0; b < count; ++b) {
      for (int64_t t = 0; t < slice; ++t) {
        T& dst = o[offsets[static_cast<size_t>(b)] + t];
        dst = plan.accumulate ? dst + v[src] : v[src];
        for (size_t d = plan.written.size(); d-- > 0;) {
          src += value_strides[d];
          if (++at[d] < plan.written[d]) break;
          src -= at[d] * value_strides[d];
          at[d] = 0;
        }
      }
    }
    return Tensors{std::move(out)};
  });
}

}  // namespace spmd::kernels::cpu
